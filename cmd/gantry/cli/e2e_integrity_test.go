package cli

// End-to-end tests of cache integrity: a build cannot alter the cache through
// its sysroot, and a damaged artifact (a blob corrupt or missing) heals.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache"
)

const integrityContent = "original content\n"

// newIntegrityProject is base.toml (an import of a.txt) and app.toml (a
// manual element that stages base.toml and runs cmds on the host).
func newIntegrityProject(t *testing.T, cmds ...string) *e2eProject {
	t.Helper()
	return newE2EProject(t, map[string]string{
		"project.toml": projectTOML("app.toml"),
		"elements/base.toml": `kind = "import"
[[sources]]
kind = "local"
path = "files/base"
`,
		"files/base/a.txt":  integrityContent,
		"elements/app.toml": manualElement([]string{"base.toml"}, cmds...),
	})
}

// blobPath is where the cache keeps content.
func (p *e2eProject) blobPath(content string) string {
	p.t.Helper()
	c, err := cache.Open(p.cache)
	if err != nil {
		p.t.Fatal(err)
	}
	return c.BlobPath(cache.DigestOf([]byte(content)))
}

// checkoutFile checks out element and returns the content of its file name.
func (p *e2eProject) checkoutFile(element, name string) string {
	p.t.Helper()
	dir := filepath.Join(p.t.TempDir(), "out")
	p.mustRun(0, "artifact", "checkout", "--deps", "none", element, dir)
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		p.t.Fatalf("artifact of %s: %v", element, err)
	}
	return string(data)
}

// damageBlob replaces the blob of content with other bytes of the same size,
// or removes it.
func damageBlob(t *testing.T, path, damage string) {
	t.Helper()
	if damage == "missing" {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.ToUpper(integrityContent)), 0o444); err != nil {
		t.Fatal(err)
	}
}

// A host build that writes to a staged dependency's file changes its own
// sysroot, never the dependency's artifact (as root, mode 0444 stops nothing:
// hard links would let it write into the CAS).
func TestE2EHostBuildCannotAlterCache(t *testing.T) {
	t.Parallel()
	// auto stages copies at once when no dependency has a bin (so no /bin/sh),
	// and stages again with copies when one has a bin without sh.
	for name, sandbox := range map[string]string{"host": "host", "auto": "auto", "auto, bin without sh": "auto"} {
		t.Run(name, func(t *testing.T) {
			p := newIntegrityProject(t,
				"echo changed >> %{sysroot}/a.txt",
				"cp %{sysroot}/a.txt %{install-root}/seen.txt")
			if strings.Contains(name, "bin") {
				p.write("files/base/bin/tool", "#!/bin/sh\n")
			}
			p.mustRun(0, "build", "--ui", "plain", "--sandbox", sandbox)
			log, _ := p.mustRun(0, "artifact", "log", "app.toml")
			if restaged := strings.Contains(log, "staging the dependencies again as copies"); restaged != strings.Contains(name, "bin") {
				t.Errorf("staged twice: %v, want %v; the build log:\n%s", restaged, !restaged, log)
			}
			if got, want := p.checkoutFile("app.toml", "seen.txt"), integrityContent+"changed\n"; got != want {
				t.Errorf("the build saw %q in its sysroot, want %q", got, want)
			}
			if got := p.checkoutFile("base.toml", "a.txt"); got != integrityContent {
				t.Errorf("the build changed base.toml's artifact: a.txt is %q, want %q", got, integrityContent)
			}
			p.verifyCache()
		})
	}
}

// Under bwrap the sysroot stays hard-linked to the cache: it is mounted
// read-only with every capability dropped, and a link from the writable build
// root to it crosses mounts. A build trying both as root changes nothing.
func TestE2EBwrapBuildCannotAlterCache(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	p := newIntegrityProject(t,
		"echo changed >> /a.txt || true",
		"chmod 644 /a.txt || true",
		"ln /a.txt %{build-root}/link || true",
		"echo changed >> %{build-root}/link || true",
		"cat /a.txt > %{install-root}/seen.txt")
	writeBusyboxSysroot(t, filepath.Join(p.root, "files", "base"), "sh", "echo", "cat", "chmod", "ln", "true")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "bwrap")
	log, _ := p.mustRun(0, "artifact", "log", "app.toml")
	for _, refusal := range []string{"Read-only file system", "cross-device link"} {
		if !strings.Contains(log, refusal) {
			t.Errorf("the build log does not show the sandbox refusing a write (%q):\n%s", refusal, log)
		}
	}
	if got := p.checkoutFile("app.toml", "seen.txt"); got != integrityContent {
		t.Errorf("the build changed its read-only sysroot: a.txt is %q, want %q", got, integrityContent)
	}
	if got := p.checkoutFile("base.toml", "a.txt"); got != integrityContent {
		t.Errorf("the build changed base.toml's artifact: a.txt is %q, want %q", got, integrityContent)
	}
	p.verifyCache()
}

// A dependency whose blob is corrupt (same size, other bytes) or missing is
// found while staging it: it is dropped from the cache with a warning naming
// it and the blob, and rebuilt in the same session; the dependant ends up with
// the right content.
func TestE2EDamagedDependencyHeals(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"corrupt", "missing"} {
		t.Run(damage, func(t *testing.T) {
			p := newIntegrityProject(t, "cp %{sysroot}/a.txt %{install-root}/copy.txt")
			p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
			blob := p.blobPath(integrityContent)
			damageBlob(t, blob, damage)

			// One session heals it: base.toml is built again, then app.toml.
			_, stderr := p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")
			digest := cache.DigestOf([]byte(integrityContent)).String()
			warnings := regexp.MustCompile(`(?m)WARNING.*the artifact of base\.toml was damaged \(blob `+regexp.QuoteMeta(digest)+
				` \(a\.txt\) is (corrupt|missing).*building it again before app\.toml`).FindAllString(stderr, -1)
			if len(warnings) != 1 {
				t.Errorf("want one warning naming base.toml, the blob %s and a.txt, got %d:\n%s", digest, len(warnings), stderr)
			}
			for el, want := range map[string]int{"base.toml": 1, "app.toml": 2} {
				if n := len(regexp.MustCompile(`\[build:`+regexp.QuoteMeta(el)+`\] +START`).FindAllString(stderr, -1)); n != want {
					t.Errorf("%s was built %d times, want %d:\n%s", el, n, want, stderr)
				}
			}
			if got := p.checkoutFile("app.toml", "copy.txt"); got != integrityContent {
				t.Errorf("app.toml's copy.txt is %q, want %q", got, integrityContent)
			}
			if got := p.checkoutFile("base.toml", "a.txt"); got != integrityContent {
				t.Errorf("base.toml's a.txt is %q, want %q", got, integrityContent)
			}
			p.verifyCache()
		})
	}
}

// A build's staging checks each blob by its type, size and mode, not its
// content (the cache hashed it when it came in, and it is read-only since): a
// blob changed in place with its size and mode put back, as only root or the
// disk can, is staged as it is, with nothing hashed; `cache verify` finds it.
// A blob left writable by the change is hashed and heals (the test above).
func TestE2EStagingChecksBlobsByTypeSizeAndMode(t *testing.T) {
	t.Parallel()
	p := newIntegrityProject(t, "cp %{sysroot}/a.txt %{install-root}/copy.txt")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
	blob := p.blobPath(integrityContent)
	damageBlob(t, blob, "corrupt")
	if err := os.Chmod(blob, 0o444); err != nil {
		t.Fatal(err)
	}
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")
	if got, want := p.checkoutFile("app.toml", "copy.txt"), strings.ToUpper(integrityContent); got != want {
		t.Errorf("app.toml staged a.txt as %q, want the changed blob's %q: staging hashed it", got, want)
	}
	stdout, _ := p.mustRun(1, "cache", "verify")
	if digest := cache.DigestOf([]byte(integrityContent)).Hash; !strings.Contains(stdout, digest) {
		t.Errorf("cache verify does not name the changed blob %s:\n%s", digest, stdout)
	}
}

// `artifact delete` and a rebuild give a sound artifact even though the
// damaged blob, of the right size, is still in the CAS.
func TestE2ERebuildReplacesCorruptBlob(t *testing.T) {
	t.Parallel()
	p := newIntegrityProject(t, "true")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
	damageBlob(t, p.blobPath(integrityContent), "corrupt")
	p.mustRun(0, "artifact", "delete", "base.toml")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
	if got := p.checkoutFile("base.toml", "a.txt"); got != integrityContent {
		t.Errorf("the rebuilt base.toml's a.txt is %q, want %q", got, integrityContent)
	}
	p.verifyCache()
}

// `artifact checkout` of an artifact with a corrupt blob fails naming the
// blob, removes it and the artifact's ref, and says so; the next build makes
// the artifact again.
func TestE2EArtifactCheckoutOfCorruptBlob(t *testing.T) {
	t.Parallel()
	p := newIntegrityProject(t, "true")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
	blob := p.blobPath(integrityContent)
	damageBlob(t, blob, "corrupt")

	_, stderr := p.mustRun(1, "artifact", "checkout", "base.toml", filepath.Join(t.TempDir(), "out"))
	digest := cache.DigestOf([]byte(integrityContent)).String()
	for _, want := range []string{digest, "a.txt", "corrupt", "dropped the damaged artifact of base.toml", "gantry build base.toml"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("artifact checkout's error does not say %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Lstat(blob); !os.IsNotExist(err) {
		t.Errorf("the corrupt blob is still in the cache (%v)", err)
	}
	if st := p.state("base.toml"); st == "cached" {
		t.Errorf("base.toml is still cached after checkout found it corrupt")
	}
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
	if got := p.checkoutFile("base.toml", "a.txt"); got != integrityContent {
		t.Errorf("the rebuilt base.toml's a.txt is %q, want %q", got, integrityContent)
	}
	p.verifyCache()
}
