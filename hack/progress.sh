# Progress of hack/deps.sh and hack/controlplane.sh, sourced by both. One line per step
# when it starts and when it ends, with the time since the run began; while Go builds run,
# one status line: what is building, packages compiled of those it needs, and an estimate
# of the time left. Steps may run in parallel (background subshells): each writes its
# events and status to files under $KF_PROGRESS, and one printer, started by the script
# that began the run, is the only writer to the terminal. Go's own chatter (go:
# downloading ...) goes to a log, shown only when a step fails.

kf_now() { date +%s; }

# kf_dur formats seconds as 42s or 3m07s.
kf_dur() {
  if [ "$1" -ge 60 ]; then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}

# progress_begin starts the printer unless a parent script already did; it is stopped on
# exit by whoever started it.
progress_begin() {
  if [ -n "${KF_PROGRESS:-}" ]; then return; fi
  KF_PROGRESS=$(mktemp -d)
  KF_PROGRESS_T0=$(kf_now)
  export KF_PROGRESS KF_PROGRESS_T0
  : >"$KF_PROGRESS/events"
  kf_printer &
  kf_printer_pid=$!
  trap progress_end EXIT
}

progress_end() {
  [ -n "${kf_printer_pid:-}" ] || return 0
  touch "$KF_PROGRESS/done"
  wait "$kf_printer_pid" 2>/dev/null || true
  kf_printer_pid=
  rm -rf "$KF_PROGRESS"
}

# say prints a line through the printer, stamped with the time since the run began.
say() {
  printf '[%s] %s\n' "$(kf_dur $(($(kf_now) - KF_PROGRESS_T0)))" "$*" >>"$KF_PROGRESS/events"
}

# kf_printer copies new events to the terminal and, between them, the status of every
# running build: in place every second on a terminal, a line every 30 s otherwise.
kf_printer() {
  local shown=0 last=0 tty=0 n line
  [ -t 1 ] && tty=1
  while :; do
    local finished=0
    [ -e "$KF_PROGRESS/done" ] && finished=1
    n=$(wc -l <"$KF_PROGRESS/events")
    if [ "$n" -gt "$shown" ]; then
      [ $tty = 1 ] && printf '\r\033[K'
      tail -n +$((shown + 1)) "$KF_PROGRESS/events" | head -n $((n - shown))
      shown=$n
    fi
    [ $finished = 1 ] && break
    line=$(kf_status)
    if [ -n "$line" ]; then
      if [ $tty = 1 ]; then
        printf '\r\033[K%s' "${line:0:$(($(tput cols 2>/dev/null || echo 120) - 1))}"
      elif [ $(($(kf_now) - last)) -ge 30 ]; then
        echo "$line"
        last=$(kf_now)
      fi
    fi
    sleep 1
  done
  [ $tty = 1 ] && printf '\r\033[K'
  return 0
}

# kf_status is one line: each running build's progress, then an estimate of the time left
# from the packages left and the pace of all builds together (they share the cores).
kf_status() {
  local f label done total start parts=() left=0 now first=0 sumdone=0 sumleft=0
  now=$(kf_now)
  for f in "$KF_PROGRESS"/*.status; do
    [ -e "$f" ] || continue
    IFS='|' read -r label done total start <"$f" || continue
    if [ "$done" = wait ]; then
      parts+=("$label: waiting for the standard library")
      continue
    fi
    if [ "$total" = 0 ]; then
      parts+=("$label: fetching modules ($(grep -c '^go: downloading' "${f%.status}.log" 2>/dev/null || true) so far)")
      continue
    fi
    parts+=("$label $done/$total packages")
    sumdone=$((sumdone + done))
    sumleft=$((sumleft + total - done))
    { [ $first = 0 ] || [ "$start" -lt $first ]; } && first=$start
  done
  [ $sumdone -gt 0 ] && left=$(((now - first) * sumleft / sumdone))
  [ ${#parts[@]} -gt 0 ] || return 0
  local IFS=';'
  local s="${parts[*]}"
  s=${s//;/, }
  if [ $left -gt 0 ]; then
    echo "  $s ($(kf_dur $((now - KF_PROGRESS_T0))) so far, about $(kf_dur $left) left)"
  else
    echo "  $s ($(kf_dur $((now - KF_PROGRESS_T0))) so far)"
  fi
}

# gostd compiles the standard library into the build cache, as every build of the run
# compiles it (CGO_ENABLED=0, no -trimpath), while their modules download: builds started
# together would each compile it again. gobuild waits for it before compiling.
gostd() {
  local began
  began=$(kf_now)
  touch "$KF_PROGRESS/std.building"
  local gobuild_flags=()
  # Should it fail, the builds compile what they need of it themselves.
  CGO_ENABLED=0 gobuild std "Go standard library" /dev/null std || { rm -f "$KF_PROGRESS/std.building"; return 1; }
  touch "$KF_PROGRESS/std.done"
  say "Go standard library: compiled in $(kf_dur $(($(kf_now) - began)))"
}

# gobuild NAME LABEL OUT PKG... builds PKG... into OUT (a file, or a directory ending in
# /) with go build -v "${gobuild_flags[@]}", in the current directory. go list first
# fetches the modules the packages need and counts the packages; the status line then
# shows how many have been compiled. On failure it prints what go said.
gobuild() {
  local name=$1 label=$2 out=$3
  shift 3
  local status=$KF_PROGRESS/$name.status log=$KF_PROGRESS/$name.log start total dl line done=0 rc
  start=$(kf_now)
  echo "$label|0|0|$start" >"$status"
  # go list fetches only the modules these packages need (go mod download would fetch
  # every module of the build list) and names the packages the build cache lacks.
  if ! go list -deps -f '{{if .Stale}}{{.ImportPath}}{{end}}' "${gobuild_flags[@]}" "$@" >"$KF_PROGRESS/$name.pkgs" 2>"$log"; then
    rm -f "$status"
    say "$label: go list failed:"
    grep -v '^go: downloading' "$log" | tail -n 40 >>"$KF_PROGRESS/events"
    return 1
  fi
  dl=$(grep -c '^go: downloading' "$log" || true)
  [ "$dl" -gt 0 ] && say "$label: downloaded $dl modules in $(kf_dur $(($(kf_now) - start)))"
  total=$(grep -c . "$KF_PROGRESS/$name.pkgs" || true)
  if [ "$name" != std ] && [ -e "$KF_PROGRESS/std.building" ]; then
    echo "$label|wait|0|$start" >"$status"
    while [ ! -e "$KF_PROGRESS/std.done" ] && [ -e "$KF_PROGRESS/std.building" ]; do sleep 1; done
  fi
  start=$(kf_now)
  echo "$label|0|$((total > 0 ? total : 1))|$start" >"$status"
  set +e
  go build -v "${gobuild_flags[@]}" -o "$out" "$@" 2>&1 | {
    while IFS= read -r line; do
      case $line in
      *' '* | *:* | '#'*) echo "$line" >>"$log" ;;
      *)
        done=$((done < total ? done + 1 : total))
        echo "$label|$done|$total|$start" >"$status.tmp" && mv "$status.tmp" "$status"
        ;;
      esac
    done
  }
  rc=${PIPESTATUS[0]}
  set -e
  rm -f "$status"
  if [ "$rc" != 0 ]; then
    say "$label: go build failed:"
    grep -v '^go: downloading' "$log" | tail -n 40 >>"$KF_PROGRESS/events"
    return "$rc"
  fi
}
