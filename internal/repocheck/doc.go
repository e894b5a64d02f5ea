// Package repocheck holds checks over the repository as a whole, as tests.
//
//   - Links: every relative link in README.md and docs/ reaches a file (and
//     a heading, where it names one), and every file under docs/ is reached
//     by links from the README.
//   - A block of commands a page of docs/ copies from deploy/README.md,
//     where the tests check them, is that block to the byte.
//   - The README stays a front page, and its cause table names every rule.
//   - analysis/doc.go's file map names each file of the package, and no
//     other.
//   - No comment cites a package, directory or file of the module that
//     is not there.
//   - The packages' imports keep to their floors, with no cycle.
//
// It has no code of its own.
package repocheck
