package element

// DamagedDependency is the Data of a build job's result when staging found a
// dependency's artifact gone from the cache, or a blob of it missing or
// corrupt. The job has removed a corrupt blob and dropped the artifact from the
// cache, so that the dependency is built (or pulled) again before the element is.
type DamagedDependency struct {
	Element string `json:"element"`
	Key     string `json:"key"`
	Blob    string `json:"blob,omitempty"` // the blob's digest, "hash/size"
	Problem string `json:"problem"`
	// Removals is the cache's count of cleanups that removed something
	// (cache.Removals) when the damage was found: the scheduler heals the
	// dependency again only when it has grown since the last heal, that is
	// when a cleanup in another process may have taken it.
	Removals uint64 `json:"removals"`
}
