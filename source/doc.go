// Package source knows the source kinds of an element: how each is keyed, tracked,
// fetched into the source cache and staged into a build root.
//
// Kinds and their refs:
//   - local, patch: files of the project, keyed by content; no ref, no fetch.
//   - tar: an archive from an http(s):// or file:// url (file:relative/path is relative to
//     the project root); ref = sha256 of the archive. Compression is told by magic bytes:
//     gzip, xz (by the xz command), bzip2, zstd, or none.
//   - remote: one file from a url; ref = its sha256; staged as filename (default: the
//     url's last path element) in directory, 0755 when executable, else 0644.
//   - git: ref = a full commit id; track = a branch or tag (default HEAD, the remote's
//     default branch).
//
// The source cache (FetchOptions.SourcesDir, shared by all projects) holds files/<sha256>
// for downloads, complete and verified (written in tmp/, synced, renamed), and bare git
// mirrors in git/<sha256(url)[:16]>-<name>. Fetch fills it and never retries: IsTemporary
// tells the scheduler whether a failure is worth another try. Stage reads only the cache,
// so a build needs no network.
//
// Aliases and mirrors (alias.go): a url "gnu:path" names an alias of the project; the
// url as written keys the source, names its git mirror and its download lock, while the
// spec's Upstream and Mirrors say where fetch and track download it from, in order.
//
// Staging a tar: base-dir "*" strips the top-level directory when the archive has exactly
// one (as BuildStream does); "" stages everything; another value stages the contents of
// that directory (or of the first directory, in sorted order, that the glob matches). The
// archive's file modes (minus set-id bits, plus owner read/write) and file times are
// kept, symbolic links too. Members that would write outside the staging directory
// (absolute paths, "..", symbolic links whose target leaves it, hard links to outside)
// and device or fifo files are refused, naming the member. With "*" or another base-dir
// the archive is read (and decompressed) twice: once for its names, once to extract.
//
// Staging git: the ref's tree is checked out with a throwaway index, without .git. With
// checkout-dot-git, the directory becomes a repository holding the ref's history only:
// HEAD detached at the ref, no branches or tags, origin set to the upstream url. With
// submodules = true, Fetch mirrors each submodule (recursively, relative urls resolved
// against the superproject's url) at the commit the superproject records, and Stage
// checks their files out into their paths, without .git even with checkout-dot-git.
// Limits: git's own filters from the user's configuration (e.g. git-lfs) still apply at
// checkout; LFS objects are not cached.
package source
