package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/element"
)

func newCacheCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Maintain the local artifact cache",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "verify",
		Short: "Check every artifact in the local cache: records, trees and blob hashes",
		Long: `Verify reads every ref, its artifact record and every blob it reaches, and checks
each blob's SHA-256. It also reports unreferenced blobs that are damaged and temp files
left by crashed processes. Exit code 1 when a problem is found.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := g.cacheDir
			if root == "" {
				// The cache does not need a project, but honours its config when there is one.
				if s, err := g.load(); err == nil {
					root = s.cacheRoot()
				} else {
					root = (&session{opts: g, user: &element.UserConfig{}}).cacheRoot()
				}
			}
			c, err := openCacheAt(root)
			if err != nil {
				return err
			}
			rep, err := c.Verify()
			if err != nil {
				return err
			}
			out := g.ios.Out
			for _, p := range rep.Problems {
				fmt.Fprintf(out, "problem: %s\n", p)
			}
			for _, t := range rep.StrayTemp {
				fmt.Fprintf(out, "stray temp file (left by a crashed process, harmless): %s\n", t)
			}
			fmt.Fprintf(out, "%s: %d refs, %d blobs checked, %d problems\n", c.Root, rep.Refs, rep.Blobs, len(rep.Problems))
			if !rep.Clean() {
				return &failedError{msg: "the cache has problems: delete the affected artifacts with `gantry artifact delete` and build again"}
			}
			return nil
		},
	})
	return cmd
}
