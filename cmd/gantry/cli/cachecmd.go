package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/gantry-build/gantry/internal/units"
	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/ui"
)

func newCacheCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Maintain the local artifact cache, or serve a shared one",
	}
	cmd.AddCommand(newCacheVerifyCmd(g, nil), newCacheUsageCmd(g, nil), newCacheGCCmd(g, nil), newCacheServeCmd(g))
	return cmd
}

// lockCache takes the cache lock, telling the user on stderr when it has to wait for
// another gantry process.
func (g *globalOptions) lockCache(c *cache.Cache, mode cache.LockMode) (*cache.Lock, error) {
	return c.Lock(context.Background(), mode, g.cacheNotice)
}

// cacheNotice says why a command waits for the cache (its lock).
func (g *globalOptions) cacheNotice(msg string) { g.ios.Note(msg) }

type cacheVerifyOptions struct {
	*globalOptions
	repair bool
	store  string // --dir
	format outputFormat
}

// newCacheVerifyCmd is `gantry cache verify`; runF, when not nil, runs instead of
// runCacheVerify (tests).
func newCacheVerifyCmd(g *globalOptions, runF func(*cacheVerifyOptions) error) *cobra.Command {
	opts := &cacheVerifyOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check every artifact in the local cache: records, trees and blob hashes",
		Long: `Verify reads every ref, its artifact record and every blob it reaches, and checks
each blob's SHA-256. It also reports unreferenced blobs that are damaged and temp files
left by crashed processes. Exit code 1 when a problem is found.

With --repair it also fixes what it found: it drops every artifact whose record or blobs
are missing or corrupt (the next build builds it again) and removes corrupt blobs and
damaged executable twins (copies of blobs with the x bit, made for hard-linked staging)
and directories found where a ref, blob or entry should be, saying what it did; the exit code is then 0 when every problem was repaired.

A cache not made yet has nothing to verify or repair: verify says so, and makes none.

--dir DIR verifies the store at DIR instead: the directory ` + "`gantry cache serve --dir`" + `
serves (or any cache directory). A server's action cache entries are checked too: each
must decode and every blob it names must be present and sound; --repair removes the
entries that are not. It may run while the server serves the store.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runCacheVerify(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.repair, "repair", false, "drop damaged artifacts and remove corrupt blobs")
	cmd.Flags().StringVar(&opts.store, "dir", "", "verify the store at `DIR` (what `cache serve --dir` serves) instead of the cache")
	opts.format.register(cmd)
	return cmd
}

func runCacheVerify(opts *cacheVerifyOptions) error {
	g, repair, dir := opts.globalOptions, opts.repair, opts.store
	if err := opts.format.check(); err != nil {
		return err
	}
	c, err := verifiedCache(g, dir)
	if err != nil {
		return err
	}
	if c == nil { // a session's cache not made yet
		res := verifyResult{Root: g.session().cacheRoot(), NoCache: true, Problems: []string{}, StrayTemp: []string{}, Clean: true}
		return res.write(g.ios.Out, opts.format)
	}
	if repair {
		lock, err := g.lockCache(c, cache.Exclusive)
		if err != nil {
			return err
		}
		defer lock.Unlock()
	}
	rep, err := c.Verify()
	if err != nil {
		return err
	}
	res := verifyResult{Root: c.Root, Refs: rep.Refs, ACEntries: rep.ACEntries, Blobs: rep.Blobs, Twins: rep.Twins,
		Problems: nonNil(rep.Problems), StrayTemp: nonNil(rep.StrayTemp), Clean: rep.Clean()}
	var failed error
	switch {
	case rep.Clean():
	case !repair && dir != "":
		failed = &failedError{msg: "the store has problems: run `gantry cache verify --dir " + dir + " --repair` to drop the damaged entries"}
	case !repair:
		failed = &failedError{msg: "the cache has problems: run `gantry cache verify --repair` to drop the damaged artifacts, then build again"}
	default:
		res.Repaired, err = c.Repair(rep)
		res.Repaired = nonNil(res.Repaired)
		if err == nil {
			var after *cache.VerifyReport
			if after, err = c.Verify(); err == nil && !after.Clean() {
				res.NotRepaired = after.Problems
				failed = &failedError{msg: "some problems could not be repaired: see above"}
			}
		}
	}
	if werr := res.write(g.ios.Out, opts.format); err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	return failed
}

// verifyResult is what `cache verify` found and repaired, as text or one JSON object.
type verifyResult struct {
	Root        string   `json:"root"`
	NoCache     bool     `json:"no-cache,omitempty"` // no cache made at Root: nothing to verify
	Refs        int      `json:"refs"`
	ACEntries   int      `json:"action-cache-entries"`
	Blobs       int      `json:"blobs"`
	Twins       int      `json:"executable-twins"`
	Problems    []string `json:"problems"`
	StrayTemp   []string `json:"stray-temp"`
	Repaired    []string `json:"repaired,omitempty"`     // with --repair
	NotRepaired []string `json:"not-repaired,omitempty"` // with --repair: found again after it
	Clean       bool     `json:"clean"`                  // no problem found (before any repair)
}

func (r *verifyResult) write(out io.Writer, f outputFormat) error {
	if f.json() {
		return writeJSONLine(out, r)
	}
	if r.NoCache {
		fmt.Fprintf(out, "no cache at %s: nothing to verify\n", r.Root)
		return nil
	}
	for _, p := range r.Problems {
		fmt.Fprintf(out, "problem: %s\n", p)
	}
	for _, t := range r.StrayTemp {
		fmt.Fprintf(out, "stray temp file (left by a crashed process, harmless): %s\n", t)
	}
	var entries string
	if r.ACEntries > 0 {
		entries = fmt.Sprintf("%d action cache entries, ", r.ACEntries)
	}
	fmt.Fprintf(out, "%s: %d refs, %s%d blobs and %d executable twins checked, %d problems\n", r.Root, r.Refs, entries, r.Blobs, r.Twins, len(r.Problems))
	for _, d := range r.Repaired {
		fmt.Fprintf(out, "repaired: %s\n", d)
	}
	for _, p := range r.NotRepaired {
		fmt.Fprintf(out, "not repaired: %s\n", p)
	}
	return nil
}

// nonNil is list, or an empty list for nil: JSON says [] rather than null.
func nonNil(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

// verifiedCache is the cache `cache verify` checks, its layout made: the store at
// dir, else the session's cache. It is nil, with nothing to do, for a session's
// cache not made yet; a store at dir must exist.
func verifiedCache(g *globalOptions, dir string) (*cache.Cache, error) {
	if dir != "" {
		c, err := cache.At(dir)
		if err != nil {
			return nil, err
		}
		if !c.Made() {
			return nil, usagef("--dir %s: no store there (want a directory `gantry cache serve --dir` serves, or a cache)", dir)
		}
		return c, c.Prepare()
	}
	s := g.session()
	c, err := s.configuredCache()
	if err != nil {
		return nil, err
	}
	if !c.Made() {
		return nil, nil
	}
	return c, s.prepareCache(c) // its layout, should a directory be gone
}

type cacheUsageOptions struct {
	*globalOptions
	format string
	top    int
}

// newCacheUsageCmd is `gantry cache usage`; runF, when not nil, runs instead of
// runCacheUsage (tests).
func newCacheUsageCmd(g *globalOptions, runF func(*cacheUsageOptions) error) *cobra.Command {
	opts := &cacheUsageOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show what the local cache holds: size on disk, artifacts, blobs, per project, the largest",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runCacheUsage(opts)
		},
	}
	cmd.Flags().StringVar(&opts.format, "format", "text", "output format: text or json")
	cmd.Flags().IntVar(&opts.top, "top", 10, "how many of the largest artifacts to show")
	return cmd
}

func runCacheUsage(opts *cacheUsageOptions) error {
	if opts.format != "text" && opts.format != "json" {
		return usagef("--format %q: use text or json", opts.format)
	}
	s := opts.session()
	c, err := s.configuredCache()
	if err != nil {
		return err
	}
	quota, err := s.quota("", c)
	if err != nil {
		return err
	}
	rep, err := c.Report(opts.top)
	if err != nil {
		return err
	}
	if opts.format == "json" {
		return writeJSON(opts.ios.Out, struct {
			*cache.UsageReport
			Quota int64 `json:"quota,omitempty"`
		}{rep, quota})
	}
	writeUsage(opts.ios.Out, rep, quota)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeUsage(w io.Writer, rep *cache.UsageReport, quota int64) {
	fmt.Fprintf(w, "cache %s\n", rep.Root)
	fmt.Fprintf(w, "  on disk      %s", units.Bytes(rep.Total))
	if quota > 0 {
		fmt.Fprintf(w, " of a %s quota (%.0f%% full)", units.Bytes(quota), 100*float64(rep.Total)/float64(quota))
	}
	fmt.Fprintf(w, "\n  blobs        %d (%s)\n", rep.Blobs, units.Bytes(rep.CAS))
	if rep.Twins > 0 {
		fmt.Fprintf(w, "  executables  %d twins of blobs, for hard-linked staging (%s)\n", rep.Twins, units.Bytes(rep.TwinBytes))
	}
	fmt.Fprintf(w, "  artifacts    %d (%d failed)\n", rep.Artifacts, rep.Failed)
	if rep.Unreferenced > 0 {
		fmt.Fprintf(w, "  unreferenced %d blobs (%s): `gantry cache gc` removes them\n", rep.Unreferenced, units.Bytes(rep.UnreferencedBytes))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(rep.Projects) > 0 {
		fmt.Fprintln(tw, "\nproject\tartifacts\tsize")
		for _, p := range rep.Projects {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", p.Project, p.Artifacts, units.Bytes(p.Bytes))
		}
	}
	if len(rep.Largest) > 0 {
		fmt.Fprintln(tw, "\nlargest artifacts\tkey\tsize\tlast use")
		for _, a := range rep.Largest {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", a.Project, a.Element, shortKey(a.Key), units.Bytes(a.Bytes), a.LastUse.Local().Format(time.DateTime))
		}
	}
	tw.Flush()
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}

func shortKey(k string) string { return k[:min(8, len(k))] }

// quota resolves the cache quota in bytes: --cache-quota > GANTRY_CACHE_QUOTA > the user
// configuration's [cache] quota; 0 when none is set.
func (s *session) quota(flag string, c *cache.Cache) (int64, error) {
	from, v := "--cache-quota", flag
	if v == "" {
		from, v = "GANTRY_CACHE_QUOTA", os.Getenv("GANTRY_CACHE_QUOTA")
	}
	if v == "" {
		from, v = "[cache] quota", s.user.Cache.Quota
	}
	if v == "" {
		return 0, nil
	}
	q, err := cache.ParseQuota(v, c.Root)
	if err != nil {
		if from == "[cache] quota" {
			return 0, &element.ProjectError{File: s.user.Path, Msg: "[cache] " + err.Error()}
		}
		return 0, usagef("%s: %v", from, err)
	}
	return q, nil
}

type gcOptions struct {
	*globalOptions
	quota    string
	keepDays int
	dryRun   bool
	format   outputFormat
}

// newCacheGCCmd is `gantry cache gc`; runF, when not nil, runs instead of runGC (tests).
func newCacheGCCmd(g *globalOptions, runF func(*gcOptions) error) *cobra.Command {
	opts := &gcOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "gc [--quota SIZE | --keep-days N] [--dry-run]",
		Short: "Clean the local cache: least recently used artifacts, unreferenced blobs, leftovers",
		Long: `gc removes what crashed processes left behind (work directories in tmp/ of
processes that no longer run, partial downloads in sources/ older than an hour) and blobs
that no artifact references. With --quota SIZE it also removes the least recently used
artifacts until the cache takes at most SIZE; with --keep-days N, artifacts not used for N
days. With neither, the configured quota ([cache] quota, GANTRY_CACHE_QUOTA) applies, down
to 80% of it, as the cleanup during a build does.

gc takes the cache lock exclusively: it waits until builds of other gantry processes have
finished staging or committing, and they wait for it. --dry-run lists what would go and
how much it would free, and removes nothing.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runGC(opts)
		},
	}
	cmd.Flags().StringVar(&opts.quota, "quota", "", "remove least recently used artifacts until the cache takes at most `SIZE` (500M, 10G, 50%)")
	cmd.Flags().IntVar(&opts.keepDays, "keep-days", 0, "remove artifacts not used for `N` days")
	cmd.Flags().BoolVarP(&opts.dryRun, "dry-run", "n", false, "only list what would be removed")
	opts.format.register(cmd)
	return cmd
}

func runGC(opts *gcOptions) error {
	g := opts.globalOptions
	if opts.quota != "" && opts.keepDays != 0 {
		return usagef("--quota and --keep-days: give one of them")
	}
	if opts.keepDays < 0 {
		return usagef("--keep-days %d: want a number of days of at least 1", opts.keepDays)
	}
	if err := opts.format.check(); err != nil {
		return err
	}
	s := g.session()
	c, err := s.configuredCacheLaidOut()
	if err != nil {
		return err
	}
	co := cache.CleanupOptions{Leftovers: true, DryRun: opts.dryRun, OlderThan: time.Duration(opts.keepDays) * 24 * time.Hour}
	switch {
	case opts.quota != "":
		if co.Target, err = cache.ParseQuota(opts.quota, c.Root); err != nil {
			return usagef("--quota: %v", err)
		}
	case opts.keepDays == 0:
		q, err := s.quota("", c)
		if err != nil {
			return err
		}
		co.Target = int64(float64(q) * cache.LowWater)
	}
	co.AfterRemove = gcAfterRemove(g) // nil but in a binary built for the tests
	lock, err := g.lockCache(c, cache.Exclusive)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	rep, err := c.Cleanup(co)
	if errors.Is(err, cache.ErrServerStore) {
		return usagef("%v", err)
	}
	if rep != nil && opts.format.json() {
		if rep.Artifacts == nil {
			rep.Artifacts = []cache.RemovedArtifact{} // [], not null
		}
		if werr := writeJSONLine(g.ios.Out, gcResult{CleanupReport: rep, Duration: ui.JSONSeconds(rep.Duration)}); err == nil {
			err = werr
		}
	} else if rep != nil {
		writeCleanup(g.ios.Out, rep)
	}
	return err
}

// gcResult is what `cache gc --format json` writes: the cleanup's report with its
// duration in seconds to the millisecond instead of its duration-ns (DurationNS,
// always nil, hides it).
type gcResult struct {
	*cache.CleanupReport
	DurationNS *struct{} `json:"duration-ns,omitempty"`
	Duration   float64   `json:"duration"`
}

// writeCleanup lists what a cleanup removed (or would remove) and what it freed.
func writeCleanup(w io.Writer, rep *cache.CleanupReport) {
	verb := "removed"
	if rep.DryRun {
		verb = "would remove"
	}
	for _, a := range rep.Artifacts {
		fmt.Fprintf(w, "%s artifact %s/%s %s (%s, last used %s)\n", verb, a.Project, a.Element, shortKey(a.Key),
			units.Bytes(a.Bytes), a.LastUse.Local().Format(time.DateTime))
	}
	for _, p := range rep.Leftovers {
		fmt.Fprintf(w, "%s leftover %s\n", verb, p)
	}
	fmt.Fprintf(w, "%s %d artifacts, %d blobs, %d leftovers: %s freed, %s → %s\n", verb, len(rep.Artifacts), rep.Blobs,
		len(rep.Leftovers), units.Bytes(rep.Freed), units.Bytes(rep.Before), units.Bytes(rep.After))
	if rep.Live > 0 {
		fmt.Fprintln(w, actions.KeptForLiveSessions(rep))
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "problem: %s (unreferenced blobs are kept until `gantry cache verify --repair` fixes it)\n", p)
	}
	if rep.Short {
		fmt.Fprintf(w, "the target size was not reached: %d artifacts are protected, the rest is not artifacts (sources, logs)\n", rep.Protected)
	}
}
