package cache

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Outcome answers what planning asks of every element: is the artifact of element at
// key cached, and did its build succeed? It reads the ref and the record, and checks the
// record against its digest, as Lookup does, but decodes only what Lookup checks and
// the outcome: not the record's dependencies, inputs or times. A missing artifact gives
// (false, false, nil); a ref that cannot be followed, (false, false, *CorruptRefError).
// The blobs the record points at are not read: staging checks those it uses.
func (c *Cache) Outcome(project, element, key string) (found, success bool, err error) {
	refPath, rd, data, err := c.followRef(project, element, key)
	if errors.Is(err, ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	var h recordHead
	if err := json.Unmarshal(data, &h); err != nil {
		return false, false, &CorruptRefError{Ref: refPath, Err: fmt.Errorf("decoding artifact record %s: %w", rd, err)}
	}
	if err := h.check(rd, project, element, key); err != nil {
		return false, false, &CorruptRefError{Ref: refPath, Err: err}
	}
	return true, h.Success, nil
}

// recordHead is the part of a record that says whose it is and how the build ended.
type recordHead struct {
	Version int    `json:"version"`
	Project string `json:"project"`
	Element string `json:"element"`
	Key     string `json:"key"`
	Success bool   `json:"success"`
	Files   Digest `json:"files"`
}

// check reports a record (blob rd) this gantry cannot use as project/element/key's.
func (h *recordHead) check(rd Digest, project, element, key string) error {
	if h.Version != recordVersion {
		return fmt.Errorf("artifact record %s has version %d, this gantry reads version %d", rd, h.Version, recordVersion)
	}
	if h.Project != project || h.Element != element || h.Key != key {
		return fmt.Errorf("artifact record %s is for %s/%s/%s", rd, h.Project, h.Element, h.Key)
	}
	if err := h.Files.Validate(); err != nil {
		return fmt.Errorf("artifact record %s: files: %w", rd, err)
	}
	return nil
}
