// Package testreapi starts real remote execution servers for tests and talks REAPI to
// them.
package testreapi
