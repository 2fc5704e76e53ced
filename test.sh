#!/usr/bin/env bash
# Runs every test of the repository, as CI does (.ci/run calls this script):
#   1. swift test: the core package's suite, about 600 tests against real node processes (3 minutes or so
#      on two cores);
#   2. the examples package (Examples/), built against the core as a consumer would;
#   3. each package under Integrations/ (the Vapor and Hummingbird drivers): built, then tested against a
#      real cachet-node. The first build of each fetches nothing (the packages come from the machine's
#      copies) but compiles its framework: 3 to 5 minutes apiece on two cores;
#   4. the example apps on those drivers (Examples/VaporApp, Examples/HummingbirdApp), each a package of its
#      own, built as an app would be: its framework is compiled again, 3 to 4 minutes apiece.
#
#   ./test.sh              everything
#   ./test.sh --core       the core package's suite only (the same as swift test)
#   ./test.sh --integrations  the examples and the integration packages only
set -euo pipefail
cd "$(dirname "$0")"

core=1
integrations=1
case "${1:-}" in
    "") ;;
    --core) integrations=0 ;;
    --integrations) core=0 ;;
    *) echo "usage: ./test.sh [--core | --integrations]" >&2; exit 64 ;;
esac

step() { echo; echo "== $* ($(date +%H:%M:%S))"; }

if [ "$core" = 1 ]; then
    step "core: swift test"
    swift test
fi
if [ "$integrations" = 1 ]; then
    step "examples: swift build --package-path Examples"
    swift build --package-path Examples
    for package in Integrations/*/; do
        package="${package%/}"
        step "$package: swift build --build-tests"
        swift build --package-path "$package" --build-tests
        step "$package: swift test"
        swift test --package-path "$package" --skip-build
        example="Examples/${package#Integrations/Cachet}App"
        if [ -f "$example/Package.swift" ]; then
            step "$example: swift build"
            swift build --package-path "$example"
        fi
    done
fi
step "all tests passed"
