// etcdload: the load generator of tests/bench/etcd_bench.sh, built against
// Debian's golang-etcd-server-dev 3.4 (go.etcd.io/etcd/clientv3) in GOPATH
// mode, offline.
//
// put mode (default): -clients C goroutines, each a closed loop of unary
// Put RPCs (one in flight per client: send, wait for the answer, send the
// next), distinct keys (/bench/<client>/<seq>), values of -value-size random
// bytes. By default every client has its own gRPC connection (-conns 0);
// -conns K shares K connections round-robin. Puts that complete during the
// first -warmup are not counted; the measured window is -duration after it.
//
// fsync mode (-fsync-floor DIR): the disk's floor for one durable write, as
// etcd's WAL does it: a preallocated file, appends of -value-size bytes,
// each followed by fdatasync. One writer.
//
// Either way it prints one JSON object on stdout:
//
//	{"mode":"put","clients":C,"conns":K,"value_size":256,"duration_s":..,
//	 "ops":N,"ops_per_s":..,"p50_ms":..,"p90_ms":..,"p99_ms":..,
//	 "max_ms":..,"errors":E}
//
// Percentiles are nearest-rank over every measured operation.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

type result struct {
	Mode      string  `json:"mode"`
	Clients   int     `json:"clients"`
	Conns     int     `json:"conns"`
	ValueSize int     `json:"value_size"`
	Duration  float64 `json:"duration_s"`
	Ops       int     `json:"ops"`
	OpsPerS   float64 `json:"ops_per_s"`
	P50       float64 `json:"p50_ms"`
	P90       float64 `json:"p90_ms"`
	P99       float64 `json:"p99_ms"`
	Max       float64 `json:"max_ms"`
	Errors    int     `json:"errors"`
	FirstErr  string  `json:"first_error,omitempty"`
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i].Microseconds()) / 1000
}

func finish(r *result, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.Ops = len(lat)
	r.OpsPerS = math.Round(float64(len(lat))/r.Duration*10) / 10
	r.P50, r.P90, r.P99 = pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0.99)
	r.Max = pct(lat, 1)
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func die(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "etcdload: "+format+"\n", args...)
	os.Exit(1)
}

func fsyncFloor(dir string, size int, warmup, duration time.Duration) {
	path := filepath.Join(dir, "fsync-floor.tmp")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		die("%v", err)
	}
	defer os.Remove(path)
	defer f.Close()
	// etcd preallocates its 64 MB WAL segments, so fdatasync has no size
	// change to write back.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 64<<20); err != nil {
		die("fallocate: %v", err)
	}
	buf := make([]byte, size)
	rand.Read(buf)
	var lat []time.Duration
	off := int64(0)
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	for {
		t := time.Now()
		if t.After(end) {
			break
		}
		if off+int64(size) > 64<<20 {
			off = 0
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			die("write: %v", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			die("fdatasync: %v", err)
		}
		off += int64(size)
		if done := time.Now(); !t.Before(measureFrom) && !done.After(end) {
			lat = append(lat, done.Sub(t))
		}
	}
	finish(&result{Mode: "fsync", Clients: 1, ValueSize: size,
		Duration: duration.Seconds()}, lat)
}

func main() {
	var (
		endpoints = flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd client endpoints")
		clients   = flag.Int("clients", 1, "concurrent clients, one Put in flight each")
		conns     = flag.Int("conns", 0, "gRPC connections shared by the clients (0: one per client)")
		valueSize = flag.Int("value-size", 256, "value bytes")
		warmup    = flag.Duration("warmup", time.Second, "unmeasured start")
		duration  = flag.Duration("duration", 10*time.Second, "measured window")
		timeout   = flag.Duration("timeout", 10*time.Second, "per-Put timeout")
		fsyncDir  = flag.String("fsync-floor", "", "measure write+fdatasync in this directory instead")
	)
	flag.Parse()
	if *fsyncDir != "" {
		fsyncFloor(*fsyncDir, *valueSize, *warmup, *duration)
		return
	}
	if *clients < 1 {
		die("-clients must be at least 1")
	}
	nconn := *conns
	if nconn <= 0 || nconn > *clients {
		nconn = *clients
	}
	logCfg := zap.NewProductionConfig()
	logCfg.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	cfg := clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: 5 * time.Second,
		LogConfig:   &logCfg,
	}
	cs := make([]*clientv3.Client, nconn)
	for i := range cs {
		c, err := clientv3.New(cfg)
		if err != nil {
			die("connect: %v", err)
		}
		defer c.Close()
		cs[i] = c
	}
	// Every connection is up before the clock starts.
	for i, c := range cs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Get(ctx, "/bench-warm", clientv3.WithCountOnly())
		cancel()
		if err != nil {
			die("connection %d: %v", i, err)
		}
	}

	var (
		mu       sync.Mutex
		all      []time.Duration
		errs     int
		firstErr string
		wg       sync.WaitGroup
	)
	start := time.Now()
	measureFrom, end := start.Add(*warmup), start.Add(*warmup+*duration)
	for id := 0; id < *clients; id++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			kv := cs[id%nconn].KV
			val := make([]byte, *valueSize)
			rand.Read(val)
			v := string(val)
			lat := make([]time.Duration, 0, 4096)
			nerr, ferr := 0, ""
			for seq := 0; ; seq++ {
				t := time.Now()
				if t.After(end) {
					break
				}
				key := fmt.Sprintf("/bench/%04d/%010d", id, seq)
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				_, err := kv.Put(ctx, key, v)
				cancel()
				done := time.Now()
				if t.Before(measureFrom) || done.After(end) {
					continue
				}
				if err != nil {
					nerr++
					if ferr == "" {
						ferr = err.Error()
					}
					continue
				}
				lat = append(lat, done.Sub(t))
			}
			mu.Lock()
			all = append(all, lat...)
			errs += nerr
			if firstErr == "" {
				firstErr = ferr
			}
			mu.Unlock()
		}(id)
	}
	wg.Wait()
	finish(&result{Mode: "put", Clients: *clients, Conns: nconn, ValueSize: *valueSize,
		Duration: duration.Seconds(), Errors: errs, FirstErr: firstErr}, all)
}
