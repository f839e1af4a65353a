// Package readmetest holds a test that runs the shell commands of the
// README files, so that they cannot drift from the code. It has no code of
// its own.
package readmetest
