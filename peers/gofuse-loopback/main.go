// gofuse-loopback: a peer for `uvfs bench`: go-fuse's loopback file
// system (fs.NewLoopbackRoot) served by fs.Mount, as go-fuse's own
// example/loopback serves it, with the timeouts as flags.
//
//	gofuse-loopback [-entry-timeout SECS] [-attr-timeout SECS] [-negative-timeout SECS] MOUNTPOINT SOURCE
//
// Without flags it runs as example/loopback does: 1 s entry and attribute
// timeouts, no negative entry caching, NullPermissions. It stays in the
// foreground until the mount goes away or it gets SIGTERM, SIGINT or
// SIGHUP, on which it unmounts and exits 0.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// secs turns a flag's seconds into the *time.Duration fs.Options wants;
// a negative value means "not set" (go-fuse then caches nothing).
func secs(name string, v float64) *time.Duration {
	if v < 0 {
		return nil
	}
	d := time.Duration(v * float64(time.Second))
	if v > 0 && d <= 0 {
		log.Fatalf("-%s %v: out of range", name, v)
	}
	return &d
}

func main() {
	log.SetFlags(log.Lmicroseconds)
	entry := flag.Float64("entry-timeout", 1, "entry timeout, seconds (example/loopback's 1 s by default)")
	attr := flag.Float64("attr-timeout", 1, "attribute timeout, seconds (example/loopback's 1 s by default)")
	negative := flag.Float64("negative-timeout", -1, "negative entry timeout, seconds (default: none, as example/loopback)")
	debug := flag.Bool("debug", false, "print every request")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintf(os.Stderr, "usage: gofuse-loopback [flags] MOUNTPOINT SOURCE\n")
		flag.PrintDefaults()
		os.Exit(2)
	}
	mnt, orig := flag.Arg(0), flag.Arg(1)
	root, err := fs.NewLoopbackRoot(orig)
	if err != nil {
		log.Fatalf("NewLoopbackRoot(%s): %v", orig, err)
	}
	opts := &fs.Options{
		EntryTimeout:    secs("entry-timeout", *entry),
		AttrTimeout:     secs("attr-timeout", *attr),
		NegativeTimeout: secs("negative-timeout", *negative),
		// As example/loopback: files with mode 000 keep it.
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			Debug:  *debug,
			FsName: orig,
			Name:   "loopback",
		},
	}
	server, err := fs.Mount(mnt, root, opts)
	if err != nil {
		log.Fatalf("mount %s: %v", mnt, err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		s := <-sigs
		log.Printf("gofuse-loopback: %v, unmounting", s)
		// A busy mount refuses; retry until it goes (or we are killed).
		for server.Unmount() != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}()
	server.Wait()
}
