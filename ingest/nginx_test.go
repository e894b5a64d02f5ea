package ingest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// customNginxFormat is a second log_format the fixture writes, given to the
// parser as written in nginx.conf.
const customNginxFormat = `log_format custom escape=json '{"t":"$msec","s":"$status","up":"$upstream_addr",' '"ups":"$upstream_status","c":"$remote_addr:$remote_port","rt":"$request_time","req":"$request","host":"$host"}';`

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startNginx runs Debian's nginx in the foreground with its own prefix,
// proxying 127.0.0.1:port to the upstreams, and returns the port and the
// paths of its two access logs (default drainscope format, custom).
func startNginx(t *testing.T, upstreams ...*pod) (port int, accessLog, customLog string) {
	t.Helper()
	// Debian puts nginx in /usr/sbin, which a non-login PATH may lack.
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr == nil {
			bin = "/usr/sbin/nginx"
		} else {
			bin = testenv.RequireBinary(t, "nginx")
		}
	}
	dir := t.TempDir()
	port = freePort(t)
	var servers strings.Builder
	for _, u := range upstreams {
		// max_fails=0: keep sending to a stopped upstream, as a proxy with
		// stale endpoints does.
		fmt.Fprintf(&servers, "    server %s max_fails=0;\n", u.addr)
	}
	accessLog, customLog = filepath.Join(dir, "access.log"), filepath.Join(dir, "custom.log")
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  log_format drainscope '%[2]s';
  %[3]s
  upstream pods {
%[4]s  }
  server {
    listen 127.0.0.1:%[5]d;
    access_log %[6]s drainscope;
    access_log %[7]s custom;
    location / {
      proxy_pass http://pods;
      proxy_next_upstream off;
      proxy_connect_timeout 2s;
    }
  }
}
`, dir, DefaultNginxFormat, customNginxFormat, servers.String(), port, accessLog, customLog)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting nginx: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return port, accessLog, customLog
		}
		select {
		case err := <-exited:
			errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s\n%s", err, stderr.String(), errLog)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %d within 10s: %s", port, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNginxFixture runs nginx from Debian's packages in front of two
// upstream pods, stops one of them mid-run, and imports nginx's own access
// logs: the failures must be the 502s the clients saw, each attributed to
// the stopped pod, and the 500s to the pod that answered them.
func TestNginxFixture(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	})
	a := startPod(t, "web-a", "127.0.0.2", h)
	b := startPod(t, "web-b", "127.0.0.3", h)
	port, accessLog, customLog := startNginx(t, a, b)
	began := time.Now()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) int {
		res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatalf("GET %s through nginx: %v", path, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	seen := map[int]int{}
	for i := range 24 {
		path := "/"
		if i%6 == 5 {
			path = "/fail"
		}
		seen[get(path)]++
	}
	if seen[502] != 0 {
		t.Fatalf("502s while both upstreams ran: %v", seen)
	}
	// web-b goes away mid-run, as a pod does once its process exits.
	b.srv.Listener.Close()
	b.srv.CloseClientConnections()
	stopped := time.Now()
	for range 20 {
		seen[get("/")]++
	}
	t.Logf("statuses the clients saw: %v", seen)
	if seen[502] == 0 {
		t.Fatal("no 502 after web-b stopped")
	}
	wantFailures := seen[500] + seen[502]

	// nginx logs a request after its response went out, so the last lines
	// may land a moment after the client has its answer.
	waitForLines(t, accessLog, 44)
	waitForLines(t, customLog, 44)
	st := storeWithPods(began.Add(-time.Hour).UnixNano(), a, b)
	data, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	writeSample(t, "nginx_access.log", data, 16)
	sum := importBytes(t, st, "nginx", "access.log", data)
	if sum.Lines != 44 || sum.Failures != wantFailures || sum.Rejected != 0 || sum.Resolved != wantFailures {
		t.Fatalf("summary %+v, want 44 lines and %d failures, all attributed", sum, wantFailures)
	}
	stoppedSec := stopped.Truncate(time.Second) // nginx's $time_local has whole seconds
	n502 := 0
	for _, e := range st.failures() {
		switch e.Code {
		case 502:
			n502++
			if e.Pod != b.ref || e.Attrs[event.AttrBackend] != b.addr.String() || e.Attrs[AttrUpstreamStatus] != "502" {
				t.Errorf("502 not attributed to the stopped pod %s (%s): %+v", b.ref, b.addr, e)
			}
			if e.At().Before(stoppedSec) {
				t.Errorf("502 at %v, before web-b stopped at %v", e.At(), stopped)
			}
		case 500:
			backend := e.Attrs[event.AttrBackend]
			want := map[string]event.PodRef{a.addr.String(): a.ref, b.addr.String(): b.ref}[backend]
			if want.IsZero() || e.Pod != want || e.Attrs[event.AttrTarget] != "/fail" {
				t.Errorf("500 from %q attributed to %v: %+v", backend, e.Pod, e)
			}
		default:
			t.Errorf("unexpected failure: %+v", e)
		}
		if e.Local.Addr().String() != "127.0.0.1" || e.Reason != event.FailStatus {
			t.Errorf("client address or reason: %+v", e)
		}
	}
	if n502 != seen[502] {
		t.Errorf("%d 502s stored, clients saw %d", n502, seen[502])
	}

	// The same run through a log_format of its own, given as written in
	// nginx.conf.
	custom, err := os.ReadFile(customLog)
	if err != nil {
		t.Fatal(err)
	}
	writeSample(t, "nginx_custom.log", custom, 16)
	recs, bad := collect(t, ParseNginx, string(custom), Options{LogFormat: customNginxFormat})
	if len(bad) != 0 {
		t.Fatalf("custom format rejected: %v", bad)
	}
	c502 := 0
	for _, r := range recs {
		if r.Failed && r.Status == 502 {
			c502++
			if r.Backend != b.addr.String() || r.Client.Port() == 0 || r.Time < stopped.Add(-time.Second).UnixNano() {
				t.Errorf("custom-format 502: %+v", r)
			}
		}
	}
	if len(recs) != 44 || c502 != seen[502] {
		t.Errorf("custom format: %d lines, %d 502s; want 44, %d", len(recs), c502, seen[502])
	}

	// The import command's path through a file on disk, strict: all good.
	im := &Importer{Store: newMemStore(), Parser: parserFor(t, "nginx", Options{}), Strict: true}
	f, err := os.Open(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s, err := im.Import(context.Background(), accessLog, f); err != nil || s.Stored != wantFailures {
		t.Errorf("strict import: %+v, %v", s, err)
	}
}

// waitForLines waits until the file has at least n complete lines.
func waitForLines(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if bytes.Count(data, []byte("\n")) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d lines after 10 s, want %d", path, bytes.Count(data, []byte("\n")), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
