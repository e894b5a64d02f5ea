package simnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// The kubelet's port-forward endpoint, as the API server calls it for
// pods/portforward: POST /portForward/NAMESPACE/NAME, upgraded to SPDY.
// Only that is served; exec, attach and logs are not.
//
// The serving certificate is self-signed and made at start: the API server
// checks a kubelet's certificate only when given
// --kubelet-certificate-authority, which the lab does not give it. The API
// server's client certificate is checked against Config.ClientCA, so
// that nothing else on the pod network can reach into the pods through it.

const (
	// A port-forward connection lives as long as its client keeps it; the
	// kubelet's defaults.
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// serveStreaming listens on the node's address and KubeletPort until ctx
// ends.
func (n *Node) serveStreaming(ctx context.Context) (func(), error) {
	cert, err := selfSigned(n.cfg.Name, n.IP())
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if n.cfg.ClientCA != "" {
		pem, err := os.ReadFile(n.cfg.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("node: reading the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("node: no certificate in the client CA %s", n.cfg.ClientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	addr := net.JoinHostPort(n.IP().String(), strconv.Itoa(int(n.cfg.KubeletPort)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node: listening for the API server on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/portForward/{namespace}/{name}", n.portForward)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	srv := &http.Server{Handler: mux, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Warn("kubelet endpoint", "err", err)
		}
	}()
	n.log.Info("kubelet endpoint", "addr", addr, "client_ca", n.cfg.ClientCA)
	return func() { srv.Close(); <-done }, nil
}

func (n *Node) portForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	wk := n.workerByName(ns, name)
	if wk == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s is not running on node %s", ns, name, n.cfg.Name), http.StatusNotFound)
		return
	}
	portforward.ServePortForward(w, r, podForwarder{wk}, name, string(wk.uid), nil,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

func (n *Node) workerByName(ns, name string) *podWorker {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.workers {
		if p := w.pod(); p.Namespace == ns && p.Name == name {
			return w
		}
	}
	return nil
}

// podForwarder connects to a port on the pod's loopback, from inside its
// network namespace, as the container runtimes do.
type podForwarder struct{ w *podWorker }

func (f podForwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	f.w.mu.Lock()
	pn := f.w.net
	f.w.mu.Unlock()
	if pn == nil {
		return errors.New("the pod has no network yet")
	}
	var conn net.Conn
	err := pn.Do(func() error {
		var err error
		// The socket stays in the namespace it was made in.
		conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
		return err
	})
	if err != nil {
		return fmt.Errorf("connecting to port %d in the pod: %w", port, err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	conn.Close() // ends the other copy's writes too
	wg.Wait()
	if err != nil && !strings.Contains(err.Error(), "use of closed network connection") {
		return err
	}
	return nil
}

func selfSigned(name string, ip netip.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{ip.AsSlice()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("node: making the kubelet endpoint's certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
