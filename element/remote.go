package element

import (
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/gantry-build/gantry/cache/remote"
)

// remoteKeys are the keys of a [[remote]] table (one artifact cache, DESIGN.md §7),
// in project.toml and the user config.
var remoteKeys = []string{"url", "push", "sources", "instance", "server-ca", "client-cert", "client-key", "token-file"}

// checkRemotes validates the [[remote]] tables of a file and makes their file paths
// absolute, relative to dir (the directory holding the file).
func checkRemotes(doc *tomlDoc, remotes []remote.Spec, dir string) error {
	for i := range remotes {
		r := &remotes[i]
		at := func(key string) string { return fmt.Sprintf("remote[%d].%s", i, key) }
		if r.URL == "" {
			return &ProjectError{File: doc.display, Line: doc.lineOf(fmt.Sprintf("remote[%d]", i)), Msg: fmt.Sprintf("remote %d has no url", i+1),
				Hint: `add a line like url = "https://cache.example:8080"`}
		}
		if err := CheckRemoteURL(r.URL); err != nil {
			// Not the offending line: it may hold a password.
			return &ProjectError{File: doc.display, Line: doc.lineOf(at("url")), Msg: fmt.Sprintf("key %q: %v", at("url"), err)}
		}
		for _, p := range []*string{&r.ServerCA, &r.ClientCert, &r.ClientKey, &r.TokenFile} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(dir, *p)
			}
		}
		if u, _ := url.Parse(r.URL); r.Sources && u.Scheme != "grpc" && u.Scheme != "grpcs" {
			return doc.valueError(at("sources"), "sources are kept through the Remote Asset API, which is gRPC: use a grpc:// or grpcs:// url, or drop sources = true")
		}
		if (r.ClientCert == "") != (r.ClientKey == "") {
			return doc.valueError(at("client-cert"), "client-cert and client-key must be given together")
		}
	}
	return nil
}

// CheckRemoteURL checks that raw is a remote URL gantry can use. The message never
// holds the URL's userinfo.
func CheckRemoteURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s is not a valid url", remote.RedactURL(raw))
	}
	switch u.Scheme {
	case "http", "https", "grpc", "grpcs":
	default:
		return fmt.Errorf("remote %s: unsupported scheme %q: use http://, https://, grpc:// or grpcs://", remote.RedactURL(raw), u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("remote %s has no host", remote.RedactURL(raw))
	}
	return nil
}
