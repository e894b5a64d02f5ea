package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainscope/drainscope/event"
)

// DefaultKubeProxyMetrics is where kube-proxy serves its metrics (and
// /proxyMode) unless --metrics-bind-address moves them.
const DefaultKubeProxyMetrics = "127.0.0.1:10249"

// syncMetric is the gauge kube-proxy sets to the time right after each
// successful iptables-restore (pkg/proxy/iptables: SyncProxyRulesLastTimestamp).
const syncMetric = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"

// LegacyOptions configure a LegacyPoller.
type LegacyOptions struct {
	Node   string // required: every event names it
	Emit   func(event.Event)
	Logger *slog.Logger
	// Metrics is kube-proxy's metrics address; DefaultKubeProxyMetrics
	// when empty.
	Metrics string
	// Interval is how often the sync metric is read; default 100 ms.
	Interval time.Duration
	// Save are the commands that print the nat tables; default
	// iptables-legacy-save -t nat and ip6tables-legacy-save -t nat.
	Save [][]string
}

// LegacyPoller follows kube-proxy's iptables mode on the legacy xtables
// backend, which announces nothing: it reads kube-proxy's sync metric
// every Interval and, when it moved, the nat tables, and reports the
// endpoints that appeared and went. Each event is stamped with the sync's
// own time from the metric (kube-proxy sets it right after its
// iptables-restore returned), so the stamp is that of the commit within a
// millisecond or so, and is seen within Interval plus the time to read
// the tables. Should two syncs fall within one Interval, the first one's
// changes carry the second's stamp. Without the metric it reads the
// tables every second and stamps them when read.
type LegacyPoller struct {
	o     LegacyOptions
	log   *slog.Logger
	hc    *http.Client
	md    *xtModel
	stats struct{ polls, saves, added, removed atomic.Uint64 }
}

// NewLegacy checks o.
func NewLegacy(o LegacyOptions) (*LegacyPoller, error) {
	if o.Node == "" {
		return nil, errors.New("dataplane: node name is required")
	}
	if o.Emit == nil {
		return nil, errors.New("dataplane: no event sink")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == "" {
		o.Metrics = DefaultKubeProxyMetrics
	}
	if o.Interval <= 0 {
		o.Interval = 100 * time.Millisecond
	}
	if len(o.Save) == 0 {
		o.Save = [][]string{{"iptables-legacy-save", "-t", "nat"}, {"ip6tables-legacy-save", "-t", "nat"}}
	}
	return &LegacyPoller{
		o: o, log: o.Logger.With("component", "dataplane", "proxy", event.ProxyIPTablesLegacy),
		hc: &http.Client{Timeout: 2 * time.Second}, md: newXTModel(event.ProxyIPTablesLegacy),
	}, nil
}

// LegacyStats counts what a LegacyPoller has done.
type LegacyStats struct {
	Polls, Saves, Added, Removed uint64
}

// Stats returns the counters.
func (p *LegacyPoller) Stats() LegacyStats {
	return LegacyStats{p.stats.polls.Load(), p.stats.saves.Load(), p.stats.added.Load(), p.stats.removed.Load()}
}

// Run follows the rules until ctx ends. It fails soft, as Watcher.Run.
func (p *LegacyPoller) Run(ctx context.Context) error {
	if err := p.read(ctx); err != nil {
		p.log.Warn("dataplane not recorded: cannot read the legacy nat table", "err", err)
		return nil
	}
	p.md.commit() // the baseline: no events for what was there
	p.log.Info("following kube-proxy's iptables rules (legacy backend)", "endpoints", len(p.md.current), "metrics", p.o.Metrics)
	var last time.Time
	warned := false
	tick := time.NewTicker(p.o.Interval)
	defer tick.Stop()
	lastRead := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		p.stats.polls.Add(1)
		at := time.Now()
		ts, err := p.syncTime(ctx)
		switch {
		case err == nil && ts.Equal(last):
			continue
		case err == nil:
			last, at = ts, ts
		case at.Sub(lastRead) < time.Second:
			continue
		default:
			if !warned && ctx.Err() == nil {
				p.log.Warn("kube-proxy's sync metric unreadable: reading the nat table every second, stamped when read", "metrics", p.o.Metrics, "err", err)
				warned = true
			}
		}
		lastRead = time.Now()
		if err := p.read(ctx); err != nil {
			if ctx.Err() == nil {
				p.log.Warn("dataplane: reading the legacy nat table failed", "err", err)
			}
			continue
		}
		for _, c := range p.md.commit() {
			k := event.DataplaneEndpointRemoved
			if c.Added {
				k = event.DataplaneEndpointAdded
				p.stats.added.Add(1)
			} else {
				p.stats.removed.Add(1)
			}
			p.o.Emit(Event(at, p.o.Node, k, c, 0))
		}
	}
}

// read runs the save commands and replaces the model's rules.
func (p *LegacyPoller) read(ctx context.Context) error {
	p.stats.saves.Add(1)
	fresh, err := p.save(ctx)
	if err != nil {
		return err
	}
	p.md.replace(fresh)
	return nil
}

// save runs the save commands and parses their nat tables, by IP family.
func (p *LegacyPoller) save(ctx context.Context) (map[byte]map[string]map[uint64]*xtRule, error) {
	fresh := map[byte]map[string]map[uint64]*xtRule{}
	for i, argv := range p.o.Save {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			if i > 0 {
				continue // no IPv6 tables: IPv4 only
			}
			return nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
		}
		chains, err := parseSave(&stdout, argv[0])
		if err != nil {
			return nil, err
		}
		fresh[byte(i)] = chains
	}
	return fresh, nil
}

// syncTime reads kube-proxy's last sync time: the latest over its IP
// families.
func (p *LegacyPoller) syncTime(ctx context.Context) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.o.Metrics+"/metrics", nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, fmt.Errorf("%s/metrics: %s", p.o.Metrics, resp.Status)
	}
	return parseSyncMetric(resp.Body, p.o.Metrics+"/metrics")
}

// parseSyncMetric finds the sync gauge in Prometheus' text format.
func parseSyncMetric(r io.Reader, name string) (time.Time, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	best := 0.0
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		if !strings.HasPrefix(l, syncMetric) {
			continue
		}
		rest := l[len(syncMetric):]
		if strings.HasPrefix(rest, "{") {
			i := strings.IndexByte(rest, '}')
			if i < 0 {
				return time.Time{}, fmt.Errorf("%s:%d: %s: unterminated labels", name, line, syncMetric)
			}
			rest = rest[i+1:]
		} else if !strings.HasPrefix(rest, " ") {
			continue // another metric with this prefix
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return time.Time{}, fmt.Errorf("%s:%d: %s: no value", name, line, syncMetric)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(v) || v < 0 {
			return time.Time{}, fmt.Errorf("%s:%d: %s: value %q", name, line, syncMetric, f[0])
		}
		best = max(best, v)
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, err
	}
	if best == 0 {
		return time.Time{}, fmt.Errorf("%s: no %s (not kube-proxy's iptables mode, or no sync yet)", name, syncMetric)
	}
	sec, frac := math.Modf(best)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}
