#!/bin/sh
# A stand-in for kubetune-trainer in the local runner tests: records how it was started and
# behaves as $FAKE_MODE says (set through the job's spec.workers.env).
# The preflight the runner starts before any worker: a report with the verdict $FAKE_PREFLIGHT
# (default OK; DatasetInvalid exits 2, as the real one does).
if [ "$1" = preflight ]; then
  verdict="${FAKE_PREFLIGHT:-OK}"
  echo "{\"verdict\": \"$verdict\", \"steps\": {\"total\": 12}, \"data\": {\"train\": {\"records\": 24, \"tokens\": 480}}, \"memory\": {\"totalGiB\": 0.5}}"
  [ "$verdict" = OK ] && exit 0
  exit 2
fi
rank="$NODE_RANK"
echo "rank $rank attempt $KUBETUNE_ATTEMPT args: $*"
echo "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT NNODES=$NNODES NODE_RANK=$NODE_RANK NPROC_PER_NODE=$NPROC_PER_NODE POD_NAME=$POD_NAME"
# The config file passed with --config must exist.
config=""
prev=""
for a in "$@"; do
  if [ "$prev" = "--config" ]; then config="$a"; fi
  prev="$a"
done
[ -f "$config" ] || { echo "no config file: $config"; exit 9; }
echo "$KUBETUNE_ATTEMPT" >> "$FAKE_STATE_DIR/attempts-$rank"
case "$FAKE_MODE" in
  succeed) exit 0 ;;
  fail-once)
    if [ "$KUBETUNE_ATTEMPT" = 0 ]; then
      if [ "$rank" = 1 ]; then
        # Fail only once the peer has started, so the test sees the peer stopped and restarted.
        while [ ! -s "$FAKE_STATE_DIR/attempts-0" ]; do sleep 0.05; done
        exit 3
      fi
      exec sleep 30  # without its peer it would hang: the runner must stop it
    fi
    exit 0 ;;
  config-error)
    if [ "$rank" = 0 ]; then exit 2; fi
    exec sleep 30 ;;
  always-fail) exit 1 ;;
  end-first)
    # The first gang: worker 1 ends as $FAKE_END says (an exit code, or "signal9"), once worker 0
    # has started; worker 0 waits to be stopped. A later gang succeeds.
    if [ "$KUBETUNE_ATTEMPT" = 0 ]; then
      if [ "$rank" = 1 ]; then
        while [ ! -s "$FAKE_STATE_DIR/attempts-0" ]; do sleep 0.05; done
        [ "$FAKE_END" = signal9 ] && kill -9 $$
        exit "$FAKE_END"
      fi
      exec sleep 30
    fi
    exit 0 ;;
  hang) exec sleep 30 ;;
esac
exit 7
