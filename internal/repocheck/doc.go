// Package repocheck holds checks over the repository as a whole, as tests:
// every relative link in README.md and docs/ reaches a file (and a heading,
// where it names one), every file under docs/ is reached by links from the
// README, the README stays a front page, its cause table
// names every rule, and the packages' imports keep to their floors with no
// cycle. It has no code of its own.
package repocheck
