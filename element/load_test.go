package element

// load is LoadCached without a parse cache.
func load(p *Project, lock *Lock, targets []string) (*Graph, error) {
	return LoadCached(p, lock, targets, nil)
}

// loadProject is LoadProjectWith with every option at its default.
func loadProject(root string) (*Project, error) { return loadProjectWith(root, nil) }

// loadProjectWith reads root/project.toml with the option settings layers gives.
func loadProjectWith(root string, layers OptionLayers) (*Project, error) {
	return LoadProjectFor(root, LoadOptions{Layers: layers})
}
