// mlnode: one hashicorp/memberlist node (one process = one node), the anchor
// side of tests/bench/memberlist_bench.sh. Built against Debian's
// golang-github-hashicorp-memberlist-dev 0.2.2 in GOPATH mode (no network);
// see the script for the build command.
//
// What it prints on stdout, one line each, every timestamp in nanoseconds of
// CLOCK_MONOTONIC (comparable between the processes of one host; the bench
// script's clock is `mlnode -now`). This is the line protocol that the mycel
// side must also speak (see memberlist_bench.sh):
//
//	CONFIG name=N key=value ...             the effective parameters, once
//	START <ns> name=N addr=IP:PORT main_ns=<ns>   listening (after Create)
//	EVENT <ns> <kind> <member> <ip:port>    kind: join | update | dead | left | leave
//	JOIN <ns> ok|fail contacted=K attempt=A [err=...]
//	BYTES <ns> reason=usr1|tick udp_bytes=B udp_pkts=P tcp_bytes=B tcp_conns=C
//
// "join" is also printed for the node itself (memberlist notifies it at
// Create). "dead" is a node this node (or a peer) declared failed, "left" a
// node that announced its own departure, "leave" a removal whose cause could
// not be read (see leaveKind). BYTES counts what this node SENDS: UDP payload
// bytes and packets handed to the kernel (without the 28 bytes of IPv4+UDP
// headers per packet), and TCP payload bytes written on every stream, those
// it dialled (push-pull, TCP fallback pings) and those it accepted (push-pull
// replies). It is printed on SIGUSR1 and every -stats-interval if set.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/memberlist"
	"golang.org/x/sys/unix"
)

func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

var outMu sync.Mutex

// emit writes one line to stdout with a single write(2) (stdout is
// unbuffered in Go), so a reader never sees half a line of ours.
func emit(format string, args ...interface{}) {
	line := fmt.Sprintf(format, args...) + "\n"
	outMu.Lock()
	os.Stdout.WriteString(line)
	outMu.Unlock()
}

// --- the counting transport -------------------------------------------------

type counters struct {
	udpBytes, udpPkts, tcpBytes, tcpConns atomic.Uint64
}

// countingConn counts the bytes written on one TCP stream.
type countingConn struct {
	net.Conn
	c *counters
}

func (cc *countingConn) Write(b []byte) (int, error) {
	n, err := cc.Conn.Write(b)
	cc.c.tcpBytes.Add(uint64(n))
	return n, err
}

// countingTransport wraps memberlist's own NetTransport. Every method that
// sends is overridden (WriteTo and WriteToAddress for packets, the two dials
// for streams it opens, StreamCh for streams it accepts: the goroutine in
// newCountingTransport wraps every conn NetTransport accepts or is handed
// through the promoted IngestStream). The rest are promoted from
// NetTransport, so memberlist still sees a NodeAwareTransport.
type countingTransport struct {
	*memberlist.NetTransport
	c        *counters
	streamCh chan net.Conn
}

var _ memberlist.NodeAwareTransport = (*countingTransport)(nil)

func newCountingTransport(nt *memberlist.NetTransport, c *counters) *countingTransport {
	t := &countingTransport{NetTransport: nt, c: c, streamCh: make(chan net.Conn)}
	go func() {
		// NetTransport never closes its channel; this goroutine lives as long
		// as the process.
		for conn := range nt.StreamCh() {
			c.tcpConns.Add(1)
			t.streamCh <- &countingConn{Conn: conn, c: c}
		}
	}()
	return t
}

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	ts, err := t.NetTransport.WriteTo(b, addr)
	if err == nil {
		t.c.udpBytes.Add(uint64(len(b)))
		t.c.udpPkts.Add(1)
	}
	return ts, err
}

func (t *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr) // what NetTransport.WriteToAddress does too
}

func (t *countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := t.NetTransport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	t.c.tcpConns.Add(1)
	return &countingConn{Conn: conn, c: t.c}, nil
}

func (t *countingTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

func (t *countingTransport) StreamCh() <-chan net.Conn { return t.streamCh }

func printBytes(c *counters, reason string) {
	emit("BYTES %d reason=%s udp_bytes=%d udp_pkts=%d tcp_bytes=%d tcp_conns=%d",
		mono(), reason, c.udpBytes.Load(), c.udpPkts.Load(), c.tcpBytes.Load(),
		c.tcpConns.Load())
}

// --- events -------------------------------------------------------------------

// nodeState023 mirrors memberlist 0.2.2's unexported nodeState (state.go):
//
//	type nodeState struct {
//		Node
//		Incarnation uint32
//		State       NodeStateType
//		StateChange time.Time
//	}
//
// NotifyLeave is called (state.go, deadNode) with &state.Node, the first
// field of a *nodeState. The exported Node.State it carries is never set by
// memberlist (it stays StateAlive: upstream issue hashicorp/memberlist#293,
// still open with PR #321 in 2025), because nodeState declares its own State
// that shadows it. The dead/left distinction is therefore read from the
// enclosing nodeState, the way 0.2.2 lays it out. The read is guarded: it is
// used only if the mirrored StateChange was set in the last minute (deadNode
// sets it to time.Now() right before notifying) and the state is Dead or
// Left; otherwise the event is printed as "leave".
type nodeState023 struct {
	memberlist.Node
	Incarnation uint32
	State       memberlist.NodeStateType
	StateChange time.Time
}

var peekState = flag.Bool("peek-state", true,
	"tell dead from left by reading memberlist 0.2.2's nodeState layout (see source)")

func leaveKind(n *memberlist.Node) string {
	st := n.State // set by a memberlist that fixes #293
	if st == memberlist.StateAlive && *peekState {
		ns := (*nodeState023)(unsafe.Pointer(n))
		if age := time.Since(ns.StateChange); age >= 0 && age < time.Minute {
			st = ns.State
		}
	}
	switch st {
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "leave"
}

type events struct{}

func printEvent(kind string, n *memberlist.Node) {
	emit("EVENT %d %s %s %s", mono(), kind, n.Name, n.Address())
}

func (events) NotifyJoin(n *memberlist.Node)   { printEvent("join", n) }
func (events) NotifyUpdate(n *memberlist.Node) { printEvent("update", n) }
func (events) NotifyLeave(n *memberlist.Node)  { printEvent(leaveKind(n), n) }

// logWriter prefixes memberlist's log lines with the monotonic time and
// drops [DEBUG] lines unless -debug is given. log.Logger calls Write once per
// line.
type logWriter struct{ debug bool }

func (w logWriter) Write(p []byte) (int, error) {
	if !w.debug && bytes.Contains(p, []byte("[DEBUG]")) {
		return len(p), nil
	}
	fmt.Fprintf(os.Stderr, "%d %s", mono(), p)
	return len(p), nil
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func main() {
	mainNs := mono()
	def := memberlist.DefaultLANConfig()
	var (
		now       = flag.Bool("now", false, "print CLOCK_MONOTONIC in ns and exit (the bench script's clock)")
		name      = flag.String("name", "", "node name (required)")
		bind      = flag.String("bind", "127.0.0.1", "address to bind and advertise")
		port      = flag.Int("port", 0, "UDP and TCP port (required)")
		join      = flag.String("join", "", "comma-separated seeds host:port; empty: first node")
		retry     = flag.Duration("join-retry", time.Second, "wait before retrying a failed join (0: give up)")
		stats     = flag.Duration("stats-interval", 0, "also print BYTES this often (0: only on SIGUSR1)")
		debug     = flag.Bool("debug", false, "keep memberlist's [DEBUG] log lines (stderr)")
		encrypt   = flag.Bool("encrypt", false, "AES-256-GCM gossip encryption with a fixed key (all nodes alike)")
		probeInt  = flag.Duration("probe-interval", def.ProbeInterval, "ProbeInterval")
		probeTO   = flag.Duration("probe-timeout", def.ProbeTimeout, "ProbeTimeout")
		indirect  = flag.Int("indirect-checks", def.IndirectChecks, "IndirectChecks")
		suspMult  = flag.Int("suspicion-mult", def.SuspicionMult, "SuspicionMult")
		suspMax   = flag.Int("suspicion-max-timeout-mult", def.SuspicionMaxTimeoutMult, "SuspicionMaxTimeoutMult")
		gossInt   = flag.Duration("gossip-interval", def.GossipInterval, "GossipInterval")
		gossN     = flag.Int("gossip-nodes", def.GossipNodes, "GossipNodes")
		gossDead  = flag.Duration("gossip-to-the-dead", def.GossipToTheDeadTime, "GossipToTheDeadTime")
		pushPull  = flag.Duration("push-pull-interval", def.PushPullInterval, "PushPullInterval (scaled up by memberlist above 32 nodes)")
		retrans   = flag.Int("retransmit-mult", def.RetransmitMult, "RetransmitMult")
		aware     = flag.Int("awareness-max-multiplier", def.AwarenessMaxMultiplier, "AwarenessMaxMultiplier")
		tcpTO     = flag.Duration("tcp-timeout", def.TCPTimeout, "TCPTimeout")
		noTCPPng  = flag.Bool("disable-tcp-pings", def.DisableTcpPings, "DisableTcpPings")
		compress  = flag.Bool("compression", def.EnableCompression, "EnableCompression")
		leaveTerm = flag.Bool("leave-on-term", false, "on SIGTERM, Leave gracefully (5 s) before exiting")
	)
	flag.Parse()
	if *now {
		fmt.Println(mono())
		return
	}
	if *name == "" || *port <= 0 {
		fmt.Fprintln(os.Stderr, "mlnode: -name and -port are required")
		os.Exit(2)
	}

	logger := log.New(logWriter{debug: *debug}, "", 0)
	c := &counters{}
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{*bind},
		BindPort:  *port,
		Logger:    logger,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mlnode: %v\n", err)
		os.Exit(1)
	}

	cfg := memberlist.DefaultLANConfig()
	cfg.Name = *name
	cfg.BindAddr = *bind
	cfg.BindPort = *port
	cfg.AdvertiseAddr = *bind
	cfg.AdvertisePort = *port
	cfg.Transport = newCountingTransport(nt, c)
	cfg.Events = events{}
	cfg.Logger = logger
	cfg.ProbeInterval = *probeInt
	cfg.ProbeTimeout = *probeTO
	cfg.IndirectChecks = *indirect
	cfg.SuspicionMult = *suspMult
	cfg.SuspicionMaxTimeoutMult = *suspMax
	cfg.GossipInterval = *gossInt
	cfg.GossipNodes = *gossN
	cfg.GossipToTheDeadTime = *gossDead
	cfg.PushPullInterval = *pushPull
	cfg.RetransmitMult = *retrans
	cfg.AwarenessMaxMultiplier = *aware
	cfg.TCPTimeout = *tcpTO
	cfg.DisableTcpPings = *noTCPPng
	cfg.EnableCompression = *compress
	if *encrypt {
		cfg.SecretKey = []byte("mycel-bench-fixed-key-0123456789")[:32]
	}

	emit("CONFIG name=%s probe_interval_ms=%d probe_timeout_ms=%d indirect_checks=%d"+
		" suspicion_mult=%d suspicion_max_timeout_mult=%d gossip_interval_ms=%d"+
		" gossip_nodes=%d gossip_to_the_dead_ms=%d push_pull_interval_ms=%d"+
		" retransmit_mult=%d awareness_max_multiplier=%d tcp_timeout_ms=%d"+
		" disable_tcp_pings=%t compression=%t encryption=%t udp_buffer_size=%d"+
		" protocol_version=%d transport=udp+tcp",
		cfg.Name, ms(cfg.ProbeInterval), ms(cfg.ProbeTimeout), cfg.IndirectChecks,
		cfg.SuspicionMult, cfg.SuspicionMaxTimeoutMult, ms(cfg.GossipInterval),
		cfg.GossipNodes, ms(cfg.GossipToTheDeadTime), ms(cfg.PushPullInterval),
		cfg.RetransmitMult, cfg.AwarenessMaxMultiplier, ms(cfg.TCPTimeout),
		cfg.DisableTcpPings, cfg.EnableCompression, *encrypt, cfg.UDPBufferSize,
		cfg.ProtocolVersion)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)

	ml, err := memberlist.Create(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mlnode: %v\n", err)
		os.Exit(1)
	}
	emit("START %d name=%s addr=%s main_ns=%d", mono(), *name,
		net.JoinHostPort(*bind, strconv.Itoa(*port)), mainNs)

	if *join != "" {
		seeds := strings.Split(*join, ",")
		go func() {
			for attempt := 1; ; attempt++ {
				n, err := ml.Join(seeds)
				if err == nil {
					emit("JOIN %d ok contacted=%d attempt=%d", mono(), n, attempt)
					return
				}
				emit("JOIN %d fail contacted=%d attempt=%d err=%q", mono(), n, attempt,
					err.Error())
				if *retry <= 0 {
					return
				}
				time.Sleep(*retry)
			}
		}()
	}

	var tick <-chan time.Time
	if *stats > 0 {
		tick = time.NewTicker(*stats).C
	}
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				printBytes(c, "usr1")
				continue
			}
			// By default stop without a graceful Leave: the bench kills its
			// meshes.
			if *leaveTerm {
				ml.Leave(5 * time.Second)
				ml.Shutdown()
			}
			os.Exit(0)
		case <-tick:
			printBytes(c, "tick")
		}
	}
}
