package kubectl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/web"
)

// connect opens what answers the API: the store named with --dsn, served
// in process, or the server in the cluster through a port-forward. cs is
// nil with --dsn; closeAPI releases what connect opened.
func (pf *pluginFlags) connect(ctx context.Context, cfg clientcmd.ClientConfig) (api *apiClient, cs kubernetes.Interface, closeAPI func(), err error) {
	if pf.dsn != "" {
		api, closeAPI, err = pf.openStore(ctx)
		return api, nil, closeAPI, err
	}
	rc, err := cfg.ClientConfig()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if cs, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, nil, nil, fmt.Errorf("making the Kubernetes client: %w", err)
	}
	srv, err := findServer(ctx, cs, pf.serverNS, pf.service)
	if err != nil {
		return nil, nil, nil, err
	}
	token := pf.token
	if token == "" {
		if token, err = serverToken(ctx, cs, srv.pod); err != nil {
			return nil, nil, nil, err
		}
	}
	fwd, err := forward(ctx, rc, srv)
	if err != nil {
		return nil, nil, nil, err
	}
	api = &apiClient{base: fwd.url, token: token, client: &http.Client{Timeout: 3 * time.Minute}, where: srv.String()}
	return api, cs, fwd.Close, nil
}

// openStore serves the API over the store --dsn names, in process.
func (pf *pluginFlags) openStore(ctx context.Context) (*apiClient, func(), error) {
	// A reader's typo must not leave an empty store behind, which
	// opening a SQLite path would make.
	if backend, target, err := store.Backend(pf.dsn); err == nil && backend == store.BackendSQLite {
		file, _, _ := strings.Cut(target, "?")
		if _, err := os.Stat(file); err != nil {
			return nil, nil, fmt.Errorf("%w: --dsn: no store at %s: %v", errUsage, file, err)
		}
	}
	st, err := store.Open(ctx, pf.dsn)
	if err != nil {
		return nil, nil, err
	}
	h := web.New(web.Options{Store: st, Log: slog.New(slog.DiscardHandler), Context: ctx})
	api := &apiClient{base: "http://drainscope", client: &http.Client{Transport: handlerTransport{h}}, where: "the store " + st.Describe()}
	return api, func() { h.Close(); st.Close() }, nil
}

// handlerTransport serves requests with an in-process handler: with --dsn
// the plugin asks the same API, served over the store it opened.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// apiClient asks the server's JSON API.
type apiClient struct {
	base   string
	token  string
	client *http.Client
	where  string // for errors: what answered
}

func (c *apiClient) get(ctx context.Context, path string, q url.Values, into any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("asking %s for %s: %w", c.where, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("reading %s's answer for %s: %w", c.where, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if resp.StatusCode == http.StatusUnauthorized {
			msg += " (check --auth-token, env DRAINSCOPE_AUTH_TOKEN)"
		}
		return fmt.Errorf("%s answered %s for %s: %s", c.where, resp.Status, path, msg)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("%s's answer for %s is not what this plugin reads (a different drainscope version?): %w", c.where, path, err)
	}
	return nil
}

// rolloutList asks for the disruptions of the window, waiting a while for
// those whose analysis the server is still reading.
func (c *apiClient) rolloutList(ctx context.Context, q url.Values) (web.Rollouts, json.RawMessage, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var raw json.RawMessage
		if err := c.get(ctx, "/api/v1/rollouts", q, &raw); err != nil {
			return web.Rollouts{}, nil, err
		}
		var l web.Rollouts
		if err := json.Unmarshal(raw, &l); err != nil {
			return l, nil, fmt.Errorf("%s's rollouts list: %w", c.where, err)
		}
		if l.Pending == 0 || time.Now().After(deadline) {
			return l, raw, nil
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return l, nil, ctx.Err()
		}
	}
}

func windowQuery(from, to time.Time) url.Values {
	return url.Values{"from": {strconv.FormatInt(from.UnixNano(), 10)}, "to": {strconv.FormatInt(to.UnixNano(), 10)}}
}
