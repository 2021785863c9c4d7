package element

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gantry-build/gantry/source"
)

// optionScope is what an element file's [[if]] blocks are read against: the project's
// options and their values for this load.
type optionScope struct {
	opts   map[string]*Option
	values map[string]string
	// digest is what the parse cache keys a conditional file's parse by: the option
	// values and the aliases (a block that does not hold is checked for undefined
	// aliases all the same).
	digest string
	// kindDigests are what it keys every file's parse by: its kind's defaults
	// (kindDigest; "" for a kind without).
	kindDigests map[string]string
	root        string                    // the project's root, which included files are read from
	kinds       map[string]map[string]any // project.toml's [kinds.NAME] defaults
	aliases     map[string]string         // project.toml's [aliases]
}

// optionScope is the scope p's element files are read in: the one LoadProjectFor
// made, shared by every element (Element.scope), or a new one for a Project made
// otherwise (tests).
func (p *Project) optionScope() *optionScope {
	if p.scope != nil {
		return p.scope
	}
	return newOptionScope(p)
}

func newOptionScope(p *Project) *optionScope {
	s := &optionScope{opts: p.Options, values: p.OptionValues, digest: optionsDigest(p.OptionValues) + optionsDigest(p.Aliases),
		root: p.Root, kinds: p.Kinds, aliases: p.Aliases}
	for name, defaults := range p.Kinds {
		if s.kindDigests == nil {
			s.kindDigests = map[string]string{}
		}
		s.kindDigests[name] = kindDigest(defaults)
	}
	return s
}

// elementBlockKeys are what a [[if]] block of an element file may set.
var elementBlockKeys = []string{"condition", "variables", "environment", "config", "depends", "build-depends", "runtime-depends", "sources"}

// sourceAt is a source's table and the key path it was written at ("sources[1]",
// "if[0].sources[0]"), for errors.
type sourceAt struct {
	path string
	v    any // a toml.Primitive or a plain table
}

// applyBlocks merges the [[if]] blocks of an element file whose condition holds into
// what the file says, in the order written, each block over what came before:
// variables, environment and config key by key, the block winning (a list is replaced
// whole unless the block composes it: composeList); depends, build-depends,
// runtime-depends and sources appended.
// Every block is checked, whether it holds or not: its keys, its condition, and the
// types of its fragments; a block that does not hold leaves no trace. configSet says
// whether some block set config keys.
func applyBlocks(doc *tomlDoc, blocks []any, scope optionScope, kind *Kind, f *elementFile, sources *[]sourceAt, config *any) (configSet bool, err error) {
	for i, v := range blocks {
		path := fmt.Sprintf("if[%d]", i)
		t, err := doc.table(path, v)
		if err != nil {
			return false, err
		}
		holds, err := blockCondition(t, scope.opts, scope.values)
		if err != nil {
			return false, err
		}
		vars, err := t.stringMap("variables")
		if err != nil {
			return false, err
		}
		env, err := t.stringMap("environment")
		if err != nil {
			return false, err
		}
		var deps [3][]string
		for j, k := range []string{"depends", "build-depends", "runtime-depends"} {
			if deps[j], _, err = t.strings(k); err != nil {
				return false, err
			}
			for _, d := range deps[j] {
				if err := checkElementName(d); err != nil {
					return false, doc.valueError(t.keyPath(k), "%v", err)
				}
			}
		}
		var blockSources []any
		if s, ok := t.m["sources"]; ok {
			if blockSources, ok = plainTables(s); !ok {
				return false, doc.valueError(t.keyPath("sources"), "expected a list of tables ([[if.sources]]), found %s", tomlTypeName(s))
			}
		}
		t.use("sources")
		blockConfig, hasConfig := t.m["config"].(map[string]any)
		if c, ok := t.m["config"]; ok && !hasConfig {
			return false, doc.valueError(t.keyPath("config"), "expected a table, found %s", tomlTypeName(c))
		}
		t.use("config")
		if err := t.done(elementBlockKeys); err != nil {
			return false, err
		}
		var at []sourceAt
		for j, s := range blockSources {
			at = append(at, sourceAt{fmt.Sprintf("%s.sources[%d]", path, j), s})
		}
		if !holds {
			specs, err := parseSources(doc, at) // checked all the same, aliases too
			if err != nil {
				return false, err
			}
			for j := range specs {
				var ua *source.UndefinedAliasError
				if errors.As(source.Resolve(&specs[j], scope.aliases, nil), &ua) {
					return false, undefinedAlias(doc, at[j].path, j, ua, scope.aliases)
				}
			}
			continue
		}
		if doc.moved == nil {
			doc.moved = map[string]string{}
		}
		for _, k := range slices.Sorted(maps.Keys(vars)) {
			doc.moved["variables."+k] = t.keyPath("variables." + k)
		}
		for _, k := range slices.Sorted(maps.Keys(env)) {
			doc.moved["environment."+k] = t.keyPath("environment." + k)
		}
		f.Variables = merge(f.Variables, vars)
		f.Environment = merge(f.Environment, env)
		f.Depends = append(slices.Clip(f.Depends), deps[0]...)
		f.BuildDepends = append(slices.Clip(f.BuildDepends), deps[1]...)
		f.RuntimeDepends = append(slices.Clip(f.RuntimeDepends), deps[2]...)
		for j, s := range at {
			doc.moved[fmt.Sprintf("sources[%d]", len(*sources)+j)] = s.path
		}
		*sources = append(*sources, at...)
		if hasConfig {
			base, err := doc.table("config", *config)
			if err != nil {
				return false, err
			}
			merged, err := mergeConfig(doc, t.keyPath("config"), base.m, blockConfig, kind)
			if err != nil {
				return false, err
			}
			for k, v := range blockConfig {
				doc.moved["config."+k] = t.keyPath("config." + k)
				if entries, ok := v.(map[string]any); ok && slices.Contains(kind.TableKeys, k) {
					// merged entry by entry (mergeConfig): each at the block's line
					for name := range entries {
						if strings.Contains(name, ".") {
							name = strconv.Quote(name) // as lineOf indexes it
						}
						doc.moved["config."+k+"."+name] = t.keyPath("config." + k + "." + name)
					}
				}
			}
			*config, configSet = merged, true
		}
	}
	return configSet, nil
}

var composeKeys = []string{"append", "prepend"}

// composition reads the { prepend = [...], append = [...] } table c at path.
func composition(doc *tomlDoc, path string, c map[string]any) (pre, post []string, err error) {
	t := &table{doc: doc, path: path, m: c}
	if pre, _, err = t.strings("prepend"); err != nil {
		return nil, nil, err
	}
	if post, _, err = t.strings("append"); err != nil {
		return nil, nil, err
	}
	return pre, post, t.done(composeKeys)
}

// composeList is a config list a block writes as { prepend = [...], append = [...] }
// (either or both): the list before the block — base, what the file or an earlier
// block set, else the kind's default (def) — with prepend before it and append after.
func composeList(doc *tomlDoc, path string, c map[string]any, base any, def []string) ([]any, error) {
	pre, post, err := composition(doc, path, c)
	if err != nil {
		return nil, err
	}
	var mid []any
	switch b := base.(type) {
	case nil:
		for _, s := range def {
			mid = append(mid, s)
		}
	case []any:
		mid = b
	default:
		return nil, doc.valueError(path, "{ append, prepend } composes a list, and the value before this block is %s", tomlTypeName(base))
	}
	out := make([]any, 0, len(pre)+len(mid)+len(post))
	for _, s := range pre {
		out = append(out, s)
	}
	out = append(out, mid...)
	for _, s := range post {
		out = append(out, s)
	}
	return out, nil
}
