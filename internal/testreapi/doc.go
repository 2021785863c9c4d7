// Package testreapi holds the REAPI execution servers tests run on 127.0.0.1:
// Bazel's own remote worker (StartBazelWorker; REAPI v2.0, compiled from Debian's
// bazel-bootstrap-source), the real server the end-to-end tests of remote
// execution build against, and Fake, an in-process REAPI v2.3 server for unit
// tests of the protocol paths the worker cannot show, with hooks to inject
// faults. It is imported only by tests.
package testreapi
