package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/drainscope/drainscope/relay"
)

// keyPair is a certificate and key read from files, read again when
// either file changes: cert-manager renews a certificate by updating its
// Secret, and kubelet swaps the mounted files, with no restart.
type keyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string    // the files' sizes and times when cert was read
	checked time.Time // when the files were last looked at
}

// loadKeyPair reads the pair, naming the flag of whichever file is wrong.
func loadKeyPair(certFile, keyFile string) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	return kp, nil
}

// keyPairCheck is how often the files are looked at: each TLS handshake
// asks for the certificate, and agents hold their connections open.
var keyPairCheck = 10 * time.Second

// get is tls.Config.GetCertificate: the pair as last read, read again
// when its files changed. A pair that no longer reads (a half-written
// renewal) keeps the last good one, with a warning.
func (kp *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.cert != nil && time.Since(kp.checked) < keyPairCheck {
		return kp.cert, nil
	}
	kp.checked = time.Now()
	stamp, err := fileStamp(kp.certFile, kp.keyFile)
	if err == nil && stamp == kp.stamp {
		return kp.cert, nil
	}
	var cert tls.Certificate
	if err == nil {
		cert, err = tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	}
	if err != nil {
		err = fmt.Errorf("--agent-tls-cert %s, --agent-tls-key %s: %w", kp.certFile, kp.keyFile, err)
		if kp.cert == nil {
			return nil, err
		}
		slog.Warn("agents' TLS: keeping the certificate last read", "err", err)
		return kp.cert, nil
	}
	if kp.cert != nil {
		slog.Info("agents' TLS: certificate read again", "cert", kp.certFile)
	}
	kp.cert, kp.stamp = &cert, stamp
	return kp.cert, nil
}

// fileStamp is the files' sizes and modification times.
func fileStamp(files ...string) (string, error) {
	var s string
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d:%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// serveAgents serves the agents' endpoint (relay.EventsPath of h, the web
// server's handler with its guards) over TLS on addr, and nothing else:
// the UI stays on --listen. It stops when ctx is done.
func serveAgents(ctx context.Context, addr string, kp *keyPair, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--agent-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(relay.EventsPath, h)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get},
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelDebug), // agents' handshakes that fail are theirs to report
	}
	slog.Info("taking agents' events over TLS", "url", "https://"+ln.Addr().String()+relay.EventsPath, "cert", kp.certFile)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("agents' TLS listener", "err", err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
