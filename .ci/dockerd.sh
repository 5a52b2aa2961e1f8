# Sourced by .ci/run: a dockerd for the docker envelope's tests. Debian's docker.io (20.10) runs as root on
# cgroup v1 with no bridge and no iptables: the containers use the host's network. start_dockerd starts
# one only if none answers, and stop_dockerd stops only the one it started.
DOCKERD_PID=""

install_docker() {
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io
  fi
}

start_dockerd() {
  docker info >/dev/null 2>&1 && return 0
  dockerd --iptables=false --ip6tables=false --bridge=none >/tmp/ci-dockerd.log 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 150); do docker info >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "error: dockerd did not answer within 30 s (/tmp/ci-dockerd.log)" >&2
  return 1
}

stop_dockerd() {
  [[ -n "$DOCKERD_PID" ]] || return 0
  kill "$DOCKERD_PID" 2>/dev/null || true
  # dockerd stops the containerd it started on SIGTERM; both take a few seconds.
  for _ in $(seq 150); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
  DOCKERD_PID=""
}
