# Shared by the fuzz scripts that build with swiftc (run.sh, run-memcache.sh, run-http.sh): the flags, a
# module built as one object, a target linked against modules, and a fuzzing run with its closing line.
# Sourced, not run.

flags=(-O -sanitize=fuzzer,address -parse-as-library -swift-version 6
    -enable-upcoming-feature ExistentialAny -enable-upcoming-feature InternalImportsByDefault)

# build_module OUT NAME SOURCE...: the module NAME from its sources, as OUT/NAME.o and OUT/module/NAME.swiftmodule.
build_module() {
    local out="$1" name="$2"
    shift 2
    mkdir -p "$out/module"
    swiftc "${flags[@]}" -I "$out/module" -wmo -module-name "$name" -emit-module \
        -emit-module-path "$out/module/$name.swiftmodule" -emit-object -o "$out/$name.o" "$@"
}

# build_target OUT NAME BINARY FILE...: the fuzz target NAME from its sources and the modules' objects.
build_target() {
    local out="$1" name="$2" binary="$3"
    shift 3
    swiftc "${flags[@]}" -I "$out/module" -module-name "$name" -o "$out/$binary" "$@" 2>&1 \
        | { grep -v "Cannot export local symbol" >&2 || true; }
}

# run_fuzzer OUT BINARY MAX_LEN RUNS MAX_TIME [EXTRA...]: fuzzes from OUT's corpus and seeds at nice 10, then
# says how long it took, the corpus' size and how many findings are in OUT.
run_fuzzer() {
    local out="$1" binary="$2" max_len="$3" runs="$4" max_time="$5"
    shift 5
    local common=(-max_len="$max_len" -print_final_stats=1 -artifact_prefix="$out/")
    if [ "$max_time" != 0 ]; then common+=(-max_total_time="$max_time"); fi
    local start
    start=$(date +%s)
    (cd "$out" && nice -n 10 "./$binary" "${common[@]}" -runs="$runs" "$@" corpus seeds)
    echo "done in $(($(date +%s) - start)) s; corpus: $(ls "$out/corpus" | wc -l) inputs; findings:" \
        "$(ls "$out" | grep -cE '^(crash|timeout|oom|leak)-' || true)" >&2
}
