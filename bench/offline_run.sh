#!/bin/sh
# Runs a Deno script of this repository on a machine with no network and no Deno, from the folder that
# bench/offline_bundle.ts packs (`.dev` by default, or $DINFER_OFFLINE_DIR): unpacks the pinned Deno and the
# registry documents Deno reads before it uses node_modules into /tmp/dinfer-offline (once), node_modules into
# the repository when it has none, the shims into build/shim when they are missing, and h2load when the machine
# has none (put on PATH), then runs
# `deno run -A` with the arguments given. Run it from the repository root.
#
#   bench/offline_run.sh bench/scaling.ts --workloads=simple --json="$OUT/scaling.json" --no-write --commit=<sha>
set -eu

bundle=${DINFER_OFFLINE_DIR:-.dev}
home=/tmp/dinfer-offline

if [ ! -f "$bundle/deno.xz" ] || [ ! -f "$bundle/node_modules.tar.xz" ] || [ ! -f "$bundle/deno_dir.tar.xz" ]; then
  echo "offline_run.sh: no bundle in '$bundle' (make one with: deno run -A bench/offline_bundle.ts)" >&2
  exit 2
fi
if [ ! -x "$home/deno" ]; then
  mkdir -p "$home"
  xz -dc "$bundle/deno.xz" > "$home/deno.part"
  chmod +x "$home/deno.part"
  mkdir -p "$home/cache"
  tar -xJf "$bundle/deno_dir.tar.xz" -C "$home/cache"
  mv "$home/deno.part" "$home/deno"
fi
if [ ! -d node_modules/.deno ]; then
  tar -xJf "$bundle/node_modules.tar.xz"
fi
# h2load (the gRPC load generator), when the machine has none and the bundle has it.
if ! command -v h2load >/dev/null 2>&1 && [ -f "$bundle/h2load.tar.xz" ]; then
  if [ ! -x "$home/tools/bin/h2load" ]; then
    mkdir -p "$home/tools"
    tar -xJf "$bundle/h2load.tar.xz" -C "$home/tools"
  fi
  PATH="$home/tools/bin:$PATH"
  export PATH
fi
mkdir -p build/shim
for so in "$bundle"/shim/*.so; do
  [ -e "build/shim/$(basename "$so")" ] || cp "$so" build/shim/
done

DENO_NO_UPDATE_CHECK=1 DENO_DIR="$home/cache" exec "$home/deno" run -A "$@"
