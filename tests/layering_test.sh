#!/usr/bin/env bash
# The dependency rules of the components, checked on the sources: which component may include which (the table below), only
# runner/torch includes LibTorch, strategies/ includes no third-party
# library and does no I/O, core/ includes the standard library only, and
# no yaml-cpp type leaks into a dsl header.
set -u
cd "$(dirname "$0")/.."
fail=0
report() { echo "layering: $1"; fail=1; }

# component -> the components its files may include ("runner" is the
# runner's top-level files: main, device choice, loss scaler, probe).
declare -A allowed=(
  [core]="core"
  [dsl]="core dsl"
  [strategies]="core dsl strategies"
  [runner/protocol]="core dsl strategies runner/protocol"
  [platform]="core dsl strategies platform"
  [runner/data]="core dsl runner/data"
  [runner/io]="core dsl strategies platform runner/io runner/data"
  [runner/dist]="core runner/protocol runner/dist"
  [runner/tracking]="core dsl platform runner/tracking"
  [runner]="core dsl strategies platform runner runner/protocol runner/data runner/io runner/dist runner/torch runner/tracking"
  [runner/torch]="core dsl strategies platform runner runner/protocol runner/data runner/io runner/dist runner/torch runner/tracking"
  [daemon]="core dsl strategies platform runner/protocol daemon"
  [cli]="core dsl strategies platform runner/protocol cli"
)

# The component of a path: runner/<sub>/... -> runner/<sub>; runner/x.h -> runner.
component() {
  case $1 in
    runner/*/*) echo "runner/$(cut -d/ -f2 <<<"$1")" ;;
    *) cut -d/ -f1 <<<"$1" ;;
  esac
}

for comp in "${!allowed[@]}"; do
  if [[ $comp == runner ]]; then
    files=$(ls runner/*.h runner/*.cpp 2>/dev/null)
  else
    files=$(find "$comp" -name '*.h' -o -name '*.cpp')
  fi
  for f in $files; do
    while read -r inc; do
      [[ -z $inc ]] && continue
      dep=$(component "$inc")
      [[ " ${allowed[$comp]} " == *" $dep "* ]] || report "$f ($comp) includes $inc ($dep)"
    done < <(grep -hoE '^#include *"[^"]+"' "$f" | sed -E 's/#include *"([^"]+)"/\1/')
  done
done

torch=$(grep -rlE '#include *[<"](torch|ATen|c10)/' --include='*.h' --include='*.cpp' \
  core dsl strategies platform daemon cli runner/protocol runner/data runner/io runner/dist runner/*.h runner/*.cpp 2>/dev/null)
[[ -z $torch ]] || report "LibTorch included outside runner/torch/: $torch"

strat=$(grep -rlE '#include *[<"](yaml-cpp|boost|sqlite3|prometheus|torch|nlohmann)' strategies 2>/dev/null)
[[ -z $strat ]] || report "strategies/ includes a third-party library: $strat"

strat_io=$(grep -rlE '#include *<(fstream|dlfcn\.h|unistd\.h|sys/[a-z]+\.h|filesystem)>' strategies 2>/dev/null)
[[ -z $strat_io ]] || report "strategies/ (pure) includes a file or system API: $strat_io"

# SQLite is platform's one library, behind platform/sqlite.h: the store
# files that tailord and `tailor` both open (the calibration store).
proto=$(grep -rlE '#include *[<"](yaml-cpp|boost|sqlite3|prometheus)' runner/protocol platform 2>/dev/null |
  grep -v '^platform/sqlite.cpp$')
[[ -z $proto ]] || report "runner/protocol or platform includes a library they must not: $proto"

core=$(grep -rhE '^#include *<' core | grep -vE '#include *<[a-z_]+>' | sort -u)
[[ -z $core ]] || report "core/ includes a non-standard header: $core"

yaml=$(grep -lE '#include *[<"]yaml-cpp' dsl/*.h 2>/dev/null)
[[ -z $yaml ]] || report "a dsl header includes yaml-cpp: $yaml"

((fail)) && exit 1
echo "layering: ok"
