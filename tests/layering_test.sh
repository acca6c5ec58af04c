#!/usr/bin/env bash
# The dependency rules of DEVELOPERS.md, checked on the sources: only
# runner/ includes LibTorch; strategies/ includes no third-party library;
# core/ includes the standard library only; no yaml-cpp type leaks into a
# dsl header that other components include.
set -u
cd "$(dirname "$0")/.."
fail=0
report() { echo "layering: $1"; fail=1; }

torch=$(grep -rlE '#include *[<"](torch|ATen|c10)/' --include='*.h' --include='*.cpp' \
  core dsl strategies daemon cli 2>/dev/null)
[[ -z $torch ]] || report "LibTorch included outside runner/: $torch"

torch_headers=$(grep -lE '#include *[<"](torch|ATen|c10)/' runner/*.h 2>/dev/null)
[[ -z $torch_headers ]] || report "runner headers seen by others include LibTorch: $torch_headers"

strat=$(grep -rlE '#include *[<"](yaml-cpp|boost|sqlite3|prometheus|torch|nlohmann)' strategies 2>/dev/null)
[[ -z $strat ]] || report "strategies/ includes a third-party library: $strat"

core=$(grep -rhE '^#include *<' core | grep -vE '#include *<[a-z_]+>' | sort -u)
[[ -z $core ]] || report "core/ includes a non-standard header: $core"

core_local=$(grep -rhE '^#include *"' core | grep -vE '#include *"core/' | sort -u)
[[ -z $core_local ]] || report "core/ includes another component: $core_local"

yaml=$(grep -lE '#include *[<"]yaml-cpp' dsl/*.h 2>/dev/null)
[[ -z $yaml ]] || report "a dsl header includes yaml-cpp: $yaml"

for f in $(grep -rlE '#include *"(runner|daemon)/' dsl strategies core cli 2>/dev/null); do
  report "$f includes a component above it"
done

((fail)) && exit 1
echo "layering: ok"
