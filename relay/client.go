package relay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// DefaultTokenFile is where kubelet mounts a pod's projected service
// account token.
const DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// Client is the agent's side: a store.Store that writes through the
// server. Only Append works; the agent never reads. Wrapped in a
// store.Writer it inherits the agent's batching, backoff, bounded buffer
// and drop counters: a batch the server refuses for what it says (400,
// 403, 413) is a row-level error (store.ErrRefused), which the Writer
// splits to drop only the events refused; any other failure (the server
// away, 429, 503, 401 while a rotated token is not yet read) keeps the
// batch for a retry.
type Client struct {
	url       string
	tokenFile string
	http      *http.Client
}

// NewClient writes to the server at base (http(s)://host[:port][/prefix]),
// with the token read from tokenFile at each batch (kubelet rotates it).
// hc nil: a client with a 30 s timeout.
func NewClient(base, tokenFile string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http(s)://host[:port]", base)
	}
	if tokenFile == "" {
		tokenFile = DefaultTokenFile
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{url: strings.TrimSuffix(base, "/") + EventsPath, tokenFile: tokenFile, http: hc}, nil
}

// gzipWriters are reused: a new gzip writer allocates hundreds of KiB,
// once per batch, which a process of many clients (drainscope lab
// simulate) pays thousands of times a second.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // the level is valid
	return zw
}}

// Append posts batch, gzip-compressed.
func (c *Client) Append(ctx context.Context, batch []event.Event) error {
	tok, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("reading the agent token: %w", err)
	}
	var body bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&body)
	if err := json.NewEncoder(zw).Encode(Batch{Events: batch}); err != nil {
		return fmt.Errorf("encoding a batch: %w", err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, &body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("posting %d events: %w", len(batch), err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var ref Refusal
	if json.Unmarshal(msg, &ref) != nil || ref.Error == "" {
		ref.Error = strings.TrimSpace(string(msg))
	}
	err = fmt.Errorf("server answered %s: %s", resp.Status, ref.Error)
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", store.ErrRefused, err)
	}
	return err
}

var errWriteOnly = errors.New("the agent's store is the server's endpoint: it takes writes only")

func (c *Client) Scan(context.Context, store.Query, func(*event.Event) error) error {
	return errWriteOnly
}
func (c *Client) StateAt(context.Context, int64, string) ([]event.Event, error) {
	return nil, errWriteOnly
}
func (c *Client) Prune(context.Context, int64) (int64, error) { return 0, errWriteOnly }
func (c *Client) Version(context.Context) (int, error)        { return 0, errWriteOnly }
func (c *Client) Describe() string                            { return "server " + c.url }
func (c *Client) Close() error                                { c.http.CloseIdleConnections(); return nil }
