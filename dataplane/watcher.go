package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
)

// Options configure a Watcher.
type Options struct {
	Node   string // required: every event names it
	Emit   func(event.Event)
	Logger *slog.Logger
	// ReadBuffer is the notification socket's receive buffer; default 8 MiB.
	// A full sync of a large table is announced in one burst; should the
	// buffer overflow all the same, the watcher reads the table again and
	// reports what changed meanwhile, flagged event.FlagRelist.
	ReadBuffer int
}

// Stats counts what a Watcher has seen.
type Stats struct {
	Commits  uint64 // transactions that touched kube-proxy's tables
	Messages uint64 // notifications read
	Added    uint64
	Removed  uint64
	Resyncs  uint64 // full reads after a lost notification
}

// Watcher follows kube-proxy's nftables rules on one node.
type Watcher struct {
	o     Options
	log   *slog.Logger
	stats struct{ commits, messages, added, removed, resyncs atomic.Uint64 }
}

// New checks o.
func New(o Options) (*Watcher, error) {
	if o.Node == "" {
		return nil, errors.New("dataplane: node name is required")
	}
	if o.Emit == nil {
		return nil, errors.New("dataplane: no event sink")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReadBuffer <= 0 {
		o.ReadBuffer = 8 << 20
	}
	return &Watcher{o: o, log: o.Logger.With("component", "dataplane", "proxy", event.ProxyNFTables)}, nil
}

// Stats returns the counters.
func (w *Watcher) Stats() Stats {
	return Stats{
		Commits: w.stats.commits.Load(), Messages: w.stats.messages.Load(),
		Added: w.stats.added.Load(), Removed: w.stats.removed.Load(), Resyncs: w.stats.resyncs.Load(),
	}
}

// batch is one received datagram's messages and when it arrived.
type batch struct {
	at   time.Time
	msgs []netlink.Message
	err  error
}

// Run follows the rules until ctx ends. It fails soft: when nftables cannot
// be read on this node it logs why once and returns nil, so that the rest
// of the agent goes on.
func (w *Watcher) Run(ctx context.Context) error {
	mon, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		w.log.Warn("dataplane not recorded: cannot open an nftables netlink socket", "err", err)
		return nil
	}
	defer mon.Close()
	if err := mon.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		w.log.Warn("dataplane not recorded: cannot join the nftables notification group (needs CAP_NET_ADMIN in the host's network namespace)", "err", err)
		return nil
	}
	w.setReadBuffer(mon)

	batches := make(chan batch, 64)
	go func() {
		defer close(batches)
		for {
			msgs, err := mon.Receive()
			at := time.Now()
			if ctx.Err() != nil {
				return
			}
			select {
			case batches <- batch{at: at, msgs: msgs, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil && !isENOBUFS(err) {
				return
			}
		}
	}()
	go func() {
		<-ctx.Done()
		mon.Close()
	}()

	md, gen, err := w.snapshot()
	if err != nil {
		w.log.Warn("dataplane not recorded: cannot read kube-proxy's nftables table", "err", err)
		return nil
	}
	switch {
	case len(md.tables) > 0:
		w.log.Info("following kube-proxy's nftables rules", "table", Table, "endpoints", len(md.flat()), "generation", gen)
	case len(md.xt.chains) > 0:
		w.log.Info("following kube-proxy's iptables rules (nf_tables backend)", "table", xtTable, "endpoints", len(md.xt.current), "generation", gen)
	default:
		w.log.Info("kube-proxy's nftables table not found (yet), nor its iptables-nft chains; following the notifications for them", "table", Table)
	}

	f := &follower{md: md, gen: gen}
	for b := range batches {
		if b.err != nil {
			if !isENOBUFS(b.err) {
				if ctx.Err() == nil {
					w.log.Warn("dataplane: reading nftables notifications failed; no longer recorded", "err", b.err)
				}
				return nil
			}
			w.stats.resyncs.Add(1)
			w.log.Warn("dataplane: nftables notifications lost (socket buffer full); reading the table again", "read_buffer", w.o.ReadBuffer)
			fresh, g, err := w.snapshot()
			if err != nil {
				w.log.Warn("dataplane: reading kube-proxy's table again failed; no longer recorded", "err", err)
				return nil
			}
			w.emit(b.at, relist(f.md, fresh), event.FlagRelist)
			f = &follower{md: fresh, gen: g}
			continue
		}
		w.stats.messages.Add(uint64(len(b.msgs)))
		for _, cs := range f.feed(b.msgs, w.log) {
			w.stats.commits.Add(1)
			w.emit(b.at, cs, 0)
		}
	}
	return nil
}

// follower applies notifications to a model transaction by transaction.
type follower struct {
	md      *model
	gen     uint32 // the snapshot's generation: older commits are in it
	pending []msg  // the open transaction's messages about kube-proxy's tables
}

// feed takes the messages of one datagram and returns the changes of each
// transaction that ended in it and touched kube-proxy's tables.
func (f *follower) feed(msgs []netlink.Message, log *slog.Logger) [][]Change {
	var out [][]Change
	for _, nm := range msgs {
		op, ok := nftOp(nm.Header)
		if !ok {
			continue
		}
		m, err := decode(nm)
		if err != nil {
			log.Debug("dataplane: undecodable nftables message", "err", err)
			continue
		}
		if op != unix.NFT_MSG_NEWGEN {
			if ours(&m) || oursXT(&m) {
				f.pending = append(f.pending, m)
			}
			continue
		}
		// The end of a transaction: apply it, unless the snapshot
		// already holds it.
		if len(f.pending) == 0 || (f.gen != 0 && int32(m.gen-f.gen) <= 0) {
			f.pending = f.pending[:0]
			continue
		}
		for i := range f.pending {
			f.md.apply(&f.pending[i])
		}
		f.pending = f.pending[:0]
		out = append(out, f.md.commit())
	}
	return out
}

// relist lists what changed between a model and a fresh read of the rules.
func relist(old, fresh *model) []Change {
	out := diff(old.flat(), fresh.flat())
	for _, c := range diff(old.xt.current, fresh.xt.current) {
		c.Proxy = fresh.xt.proxy
		out = append(out, c)
	}
	return out
}

// emit turns changes into events stamped at.
func (w *Watcher) emit(at time.Time, cs []Change, flags event.Flags) {
	for _, c := range cs {
		k := event.DataplaneEndpointRemoved
		if c.Added {
			k = event.DataplaneEndpointAdded
			w.stats.added.Add(1)
		} else {
			w.stats.removed.Add(1)
		}
		e := Event(at, w.o.Node, k, c, flags)
		w.o.Emit(e)
	}
}

// Event builds the sealed event of one change.
func Event(at time.Time, node string, k event.Kind, c Change, flags event.Flags) event.Event {
	e := event.Event{
		Time:    at.UnixNano(),
		Kind:    k,
		Node:    node,
		Source:  event.SourceDataplane,
		Pod:     event.PodRef{Namespace: c.Namespace},
		Service: c.Name,
		Local:   c.Addr,
		Flags:   flags,
		Attrs: map[string]string{
			event.AttrProxy:       cmp.Or(c.Proxy, event.ProxyNFTables),
			event.AttrServicePort: c.Port,
			event.AttrProtocol:    c.Protocol,
			event.AttrChain:       c.Chain,
		},
	}
	e.Seal()
	return e
}

func (w *Watcher) setReadBuffer(c *netlink.Conn) {
	if err := c.SetReadBuffer(w.o.ReadBuffer); err != nil {
		w.log.Debug("dataplane: setting the notification socket's buffer", "err", err)
	}
	// Beyond net.core.rmem_max only with CAP_NET_ADMIN, which reading
	// nftables needs anyway.
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, w.o.ReadBuffer)
	})
}

func isENOBUFS(err error) bool {
	var oe *netlink.OpError
	if errors.As(err, &oe) {
		return errors.Is(oe.Err, unix.ENOBUFS)
	}
	return errors.Is(err, unix.ENOBUFS)
}

// snapshot reads kube-proxy's tables whole, retrying until the ruleset's
// generation is the same before and after, so that the dump is of one
// commit; notifications of that generation or older are then skipped.
func (w *Watcher) snapshot() (*model, uint32, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("opening an nftables netlink socket: %w", err)
	}
	defer c.Close()
	var lastErr error
	for range 10 {
		g0, err := getGen(c)
		if err != nil {
			return nil, 0, err
		}
		md, err := dump(c)
		if err != nil {
			lastErr = err
			continue
		}
		g1, err := getGen(c)
		if err != nil {
			return nil, 0, err
		}
		if g0 == g1 {
			md.commit()
			return md, g0, nil
		}
		lastErr = fmt.Errorf("ruleset changed while reading it (generation %d → %d)", g0, g1)
	}
	return nil, 0, lastErr
}

func request(op uint16, family byte, flags netlink.HeaderFlags, attrs []netlink.Attribute) (netlink.Message, error) {
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return netlink.Message{}, err
	}
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | op),
			Flags: netlink.Request | flags,
		},
		Data: append([]byte{family, unix.NFNETLINK_V0, 0, 0}, data...),
	}, nil
}

func getGen(c *netlink.Conn) (uint32, error) {
	req, err := request(unix.NFT_MSG_GETGEN, unix.AF_UNSPEC, 0, nil)
	if err != nil {
		return 0, err
	}
	msgs, err := c.Execute(req)
	if err != nil {
		return 0, fmt.Errorf("reading the nftables generation: %w", err)
	}
	for _, m := range msgs {
		if d, err := decode(m); err == nil && d.op == unix.NFT_MSG_NEWGEN {
			return d.gen, nil
		}
	}
	return 0, errors.New("reading the nftables generation: no answer")
}

// dump reads the rules and anonymous sets of kube-proxy's tables. A family
// without the table is skipped.
func dump(c *netlink.Conn) (*model, error) {
	md := newModel()
	for _, fam := range []byte{unix.NFPROTO_IPV4, unix.NFPROTO_IPV6} {
		tbl := []netlink.Attribute{{Type: unix.NFTA_SET_TABLE, Data: []byte(Table + "\x00")}}
		req, _ := request(unix.NFT_MSG_GETSET, fam, netlink.Dump|netlink.Acknowledge, tbl)
		msgs, err := c.Execute(req)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing the sets of table %s (family %d): %w", Table, fam, err)
		}
		var anon []string
		for _, nm := range msgs {
			m, err := decode(nm)
			if err != nil {
				return nil, err
			}
			md.apply(&m)
			if m.setFlags&unix.NFT_SET_ANONYMOUS != 0 {
				anon = append(anon, m.set)
			}
		}
		for _, s := range anon {
			req, _ := request(unix.NFT_MSG_GETSETELEM, fam, netlink.Dump|netlink.Acknowledge, []netlink.Attribute{
				{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(Table + "\x00")},
				{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(s + "\x00")},
			})
			msgs, err := c.Execute(req)
			if err != nil {
				return nil, fmt.Errorf("listing the elements of set %s: %w", s, err)
			}
			for _, nm := range msgs {
				m, err := decode(nm)
				if err != nil {
					return nil, err
				}
				md.apply(&m)
			}
		}
		if err := dumpRules(c, md, fam, Table); err != nil {
			return nil, err
		}
	}
	// iptables-nft's nat tables, where kube-proxy's iptables mode writes.
	for _, fam := range []byte{unix.NFPROTO_IPV4, unix.NFPROTO_IPV6} {
		if err := dumpRules(c, md, fam, xtTable); err != nil {
			return nil, err
		}
	}
	return md, nil
}

// dumpRules reads the rules of one table into md; a table that does not
// exist is no error.
func dumpRules(c *netlink.Conn, md *model, fam byte, tbl string) error {
	req, _ := request(unix.NFT_MSG_GETRULE, fam, netlink.Dump|netlink.Acknowledge,
		[]netlink.Attribute{{Type: unix.NFTA_RULE_TABLE, Data: []byte(tbl + "\x00")}})
	msgs, err := c.Execute(req)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("listing the rules of table %s (family %d): %w", tbl, fam, err)
	}
	for _, nm := range msgs {
		m, err := decode(nm)
		if err != nil {
			return err
		}
		md.apply(&m)
	}
	return nil
}
