#!/usr/bin/env bash
# How the TPU machine's runs here were made (kept here, since .device/ is not tracked): copied into .device/ with
# ../shared/device/prepare-tpu.sh's bundle, each device call carries [".device"] and runs
#   source .device/env.sh || exit 1; Q=.device/q9.txt CORES=2 LIMIT=525 bash .device/queue.sh
# and $OUT/runs.tgz comes back as the next call's .device/runs.tgz.
# One device call: every lane of the queue file $Q ("lane|benchmark.sh arguments" a line; a lane runs its
# lines one after the other) runs with $CORES cores a run for $LIMIT seconds, then gets SIGTERM (each run
# keeps a checkpoint); the runs folder travels back as $OUT/runs.tgz and comes in again as .device/runs.tgz.
set -u
W=/tmp/work; mkdir -p "$W"
[ -f .device/runs.tgz ] && [ ! -d "$W/runs" ] && tar -C "$W" -xzf .device/runs.tgz
export JAX_PLATFORMS=cpu
for lane in $(cut -d'|' -f1 "$Q" | sort -u); do
  grep "^$lane|" "$Q" | cut -d'|' -f2- > "$W/lane$lane.txt"
  timeout -s TERM "$LIMIT" bash -c '
    while read -r args; do
      eval ./benchmark.sh --workdir '"$W"' --workers 1 --cores-per-run '"$CORES"' --no-pin --python python3 $args || [ $? -eq 1 ] || exit
    done < '"$W/lane$lane.txt"'' > "$W/lane$lane.log" 2>&1 &
done
wait
sleep 2
tar -C "$W" -czf "$OUT/runs.tgz" runs
for f in "$W"/lane*.log; do echo "== $f"; tail -4 "$f"; done
ls "$W/runs"; du -sh "$OUT/runs.tgz"
