// Package bgserve holds TestServe, which bench/remote-exec.sh (SERVER=buildgrid)
// runs to start BuildGrid with internal/testreapi's helper and keep it up until
// it is sent SIGTERM. It has no code of its own.
package bgserve
