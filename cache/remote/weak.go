package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gantry-build/gantry/cache"
)

// Weak entries: beside an artifact's entry under its key, a remote keeps one under
// "weak:" + its weak key (WeakEntryKey) with the same digests, written by the pushes of
// artifacts with a weak key: a non-strict session asks for it (WeakArtifactKey), reads
// the key from the record it names and pulls the artifact under that key as any other.

// WeakEntryKey is the entry key of the artifacts with weak key weak.
func WeakEntryKey(weak string) string { return "weak:" + weak }

// pushWeakEntry points a's weak entry at e, a's entry on store, unless it points there
// already (or a has no weak key).
func pushWeakEntry(ctx context.Context, store Store, a *cache.Artifact, e *Entry) error {
	if a.WeakKey == "" {
		return nil
	}
	if cur, err := store.GetEntry(ctx, WeakEntryKey(a.WeakKey)); err == nil && *cur == *e {
		return nil
	}
	return store.UpdateEntry(ctx, WeakEntryKey(a.WeakKey), e)
}

// WeakArtifactKey returns the key of the artifact of element that store's weak entry
// for weak names, if store also has that artifact's entry: its record says the key,
// and that it succeeded with weak key weak. None gives an error wrapping
// cache.ErrNotFound; a record that does not match its digest or says otherwise, a
// Corrupt error.
func WeakArtifactKey(ctx context.Context, store Store, weak string) (string, error) {
	e, err := store.GetEntry(ctx, WeakEntryKey(weak))
	if err != nil {
		return "", err
	}
	data, err := fetchSmall(ctx, store, e.Record, &meter{})
	if err != nil {
		return "", err
	}
	var rec struct {
		Key     string `json:"key"`
		WeakKey string `json:"weak_key"`
		Success bool   `json:"success"`
	}
	if err := json.Unmarshal(data, &rec); err != nil || rec.Key == "" || rec.WeakKey != weak || !rec.Success {
		if err == nil {
			err = errors.New("it is not a successful artifact with that weak key")
		}
		return "", &Error{Remote: store.Name(), Op: "reading the record of weak key " + weak, Kind: Corrupt, Err: err}
	}
	strong, err := store.GetEntry(ctx, rec.Key)
	if err != nil {
		return "", err
	}
	if *strong != *e {
		return "", fmt.Errorf("the entry of key %s is another artifact than weak key %s names: %w", rec.Key, weak, cache.ErrNotFound)
	}
	return rec.Key, nil
}
