package element

// load is LoadCached without a parse cache.
func load(p *Project, lock *Lock, targets []string) (*Graph, error) {
	return LoadCached(p, lock, targets, nil)
}
