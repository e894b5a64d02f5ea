package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// server is a drainscope serve process.
type server struct {
	cmd     *exec.Cmd
	url     string
	metrics string // its Prometheus endpoint
	pprof   string // its runtime profiles (--pprof)
	done    chan error
	once    sync.Once
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) alive() error {
	select {
	case err := <-s.done:
		s.done <- err
		return fmt.Errorf("the server exited: %v", err)
	default:
		return nil
	}
}

func (s *server) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

func startServer(ctx context.Context, o Options, cl *Cluster, dsn, name string) (*server, error) {
	var addrs [2]string // the UI's and the metrics'
	var lns [2]net.Listener
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[i], lns[i] = ln.Addr().String(), ln // held until both are chosen, so they differ
	}
	for _, ln := range lns {
		ln.Close()
	}
	addr := addrs[0]
	args := append([]string{"serve", "--listen", addr, "--metrics-listen", addrs[1], "--pprof", "--store", dsn, "--kubeconfig", cl.Kubeconfig(),
		"--agent-service-account", AgentNamespace + "/" + AgentServiceAccount, "--retention", "0"}, o.ServerArgs...)
	cmd := o.Server(args...)
	logf, err := os.Create(filepath.Join(o.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting drainscope serve: %w", err)
	}
	s := &server{cmd: cmd, url: "http://" + addr, metrics: "http://" + addrs[1] + "/metrics", pprof: "http://" + addrs[1] + "/debug/pprof/", done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); logf.Close() }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := s.alive(); err != nil {
			return nil, fmt.Errorf("%w (log: %s)", err, logf.Name())
		}
		// Ready: its pod index has listed the cluster's pods, as a
		// Kubernetes Service would wait for before sending it anything.
		if resp, err := http.Get(s.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("drainscope serve was not ready (/readyz) within 60 s (log: %s)", logf.Name())
		}
	}
}

// freshDatabase creates database name beside the one base names and
// returns its DSN and a function that drops it.
func freshDatabase(ctx context.Context, base, name string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to Postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("creating database %s: %w", name, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

func dbOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}
