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
# Before any of them it installs the Debian packages the tests need (Tests/debian-packages.txt, the one
# list, which .ci/run relies on too) when some are missing: with apt-get as root, or through sudo; without
# either it names them and stops. A step that fails does not stop the others: the summary at the end names
# every failed step, and the script then exits 1.
#
#   ./test.sh              everything
#   ./test.sh --core       the core package's suite only (swift test)
#   ./test.sh --integrations  the examples and the integration packages only
#   ./test.sh --setup      install (or name) the missing packages, and run nothing
set -uo pipefail
cd "$(dirname "$0")"

core=1
integrations=1
case "${1:-}" in
    "") ;;
    --core) integrations=0 ;;
    --integrations) core=0 ;;
    --setup) core=0; integrations=0 ;;
    *) echo "usage: ./test.sh [--core | --integrations | --setup]" >&2; exit 64 ;;
esac

step() { echo; echo "== $* ($(date +%H:%M:%S))"; }

# The packages of Tests/debian-packages.txt that dpkg does not list as installed.
missing=()
while read -r package _; do
    case "$package" in ""|"#"*) continue ;; esac
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done < Tests/debian-packages.txt
if [ ${#missing[@]} -gt 0 ]; then
    step "installing what the tests need: ${missing[*]}"
    if [ "$(id -u)" -eq 0 ]; then
        install=(apt-get)
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        install=(sudo apt-get)
    else
        echo "the tests need these Debian packages, which are not installed: ${missing[*]}" >&2
        echo "install them (sudo apt-get install ${missing[*]}) or run ./test.sh as root" >&2
        exit 2
    fi
    if ! { "${install[@]}" update -q && DEBIAN_FRONTEND=noninteractive "${install[@]}" install -y -q "${missing[@]}"; }; then
        echo "installing ${missing[*]} failed (see apt-get's output above)" >&2
        exit 2
    fi
fi
command -v swift >/dev/null 2>&1 || { echo "swift is not on PATH: install Swift 6 (swift.org) first" >&2; exit 2; }
if [ "$core" = 0 ] && [ "$integrations" = 0 ]; then
    step "set-up done: every package of Tests/debian-packages.txt is installed"
    exit 0
fi

failed=()
# Runs one step; a failure is noted and the next step runs.
run() {
    "$@" || failed+=("$*")
}

if [ "$core" = 1 ]; then
    step "core: swift test"
    run swift test
fi
if [ "$integrations" = 1 ]; then
    step "examples: swift build --package-path Examples"
    run swift build --package-path Examples
    for package in Integrations/*/; do
        package="${package%/}"
        step "$package: swift build --build-tests"
        if swift build --package-path "$package" --build-tests; then
            step "$package: swift test"
            run swift test --package-path "$package" --skip-build
        else
            failed+=("swift build --package-path $package --build-tests")
        fi
        example="Examples/${package#Integrations/Cachet}App"
        if [ -f "$example/Package.swift" ]; then
            step "$example: swift build"
            run swift build --package-path "$example"
        fi
    done
fi
if [ ${#failed[@]} -gt 0 ]; then
    step "failed: ${#failed[@]} step(s)"
    printf '   %s\n' "${failed[@]}"
    exit 1
fi
step "all tests passed"
