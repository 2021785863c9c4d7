package remote

import (
	"fmt"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
)

// How an artifact is kept in a REAPI ActionCache (or bazel-remote's /ac/): an
// ActionResult under Key(key) whose
//   - output directory "files" is the files tree (a Tree blob, and its root),
//   - output file "gantry-artifact.json" is the artifact record,
//   - stdout is the build log.
const (
	acFilesPath  = "files"
	acRecordPath = "gantry-artifact.json"
)

// entryActionResult encodes e as an ActionResult.
func entryActionResult(e *Entry) *repb.ActionResult {
	ar := &repb.ActionResult{
		OutputDirectories: []*repb.OutputDirectory{{
			Path:                acFilesPath,
			TreeDigest:          optionalProto(e.Tree),
			RootDirectoryDigest: optionalProto(e.Files),
		}},
		OutputFiles: []*repb.OutputFile{{Path: acRecordPath, Digest: optionalProto(e.Record)}},
	}
	if !e.Log.IsZero() {
		ar.StdoutDigest = e.Log.Proto()
	}
	return ar
}

// actionResultEntry decodes an ActionResult written by entryActionResult. Any
// other shape is an error (the caller reports it as a corrupt entry).
func actionResultEntry(ar *repb.ActionResult) (*Entry, error) {
	var e Entry
	var err error
	for _, d := range ar.OutputDirectories {
		if d.Path != acFilesPath {
			continue
		}
		if e.Tree, err = digestFromProto(d.TreeDigest); err != nil {
			return nil, fmt.Errorf("output directory %q: tree: %w", d.Path, err)
		}
		if d.RootDirectoryDigest != nil {
			if e.Files, err = digestFromProto(d.RootDirectoryDigest); err != nil {
				return nil, fmt.Errorf("output directory %q: root: %w", d.Path, err)
			}
		}
	}
	for _, f := range ar.OutputFiles {
		if f.Path == acRecordPath {
			if e.Record, err = digestFromProto(f.Digest); err != nil {
				return nil, fmt.Errorf("output file %q: %w", f.Path, err)
			}
		}
	}
	if ar.StdoutDigest != nil && ar.StdoutDigest.Hash != "" {
		if e.Log, err = digestFromProto(ar.StdoutDigest); err != nil {
			return nil, fmt.Errorf("stdout: %w", err)
		}
	}
	if e.Tree.IsZero() || e.Record.IsZero() {
		return nil, fmt.Errorf("not a gantry artifact: no %q output directory or no %q output file", acFilesPath, acRecordPath)
	}
	return &e, nil
}

// optionalProto is Proto, but nil for the zero Digest.
func optionalProto(d cache.Digest) *repb.Digest {
	if d.IsZero() {
		return nil
	}
	return d.Proto()
}

// digestFromProto converts and validates a REAPI Digest that must be there.
func digestFromProto(p *repb.Digest) (cache.Digest, error) {
	if p == nil {
		return cache.Digest{}, fmt.Errorf("missing digest")
	}
	d := cache.DigestFromProto(p)
	if err := d.Validate(); err != nil {
		return cache.Digest{}, err
	}
	return d, nil
}
