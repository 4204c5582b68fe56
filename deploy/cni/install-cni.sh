#!/bin/sh
# Chain Sluice's CNI plugin after the node's existing CNI, or take it out.
#
#   install-cni.sh install     copy the plugin binary, append {"type":"sluice"}
#                              to the primary conflist (idempotent)
#   install-cni.sh uninstall   take Sluice out of every conflist, restore a
#                              converted .conf; --purge also deletes the binary
#   install-cni.sh watch       the DaemonSet's cni-installer container: every
#                              SLUICE_CNI_RECHECK_SECONDS, install (when
#                              SLUICE_CNI_CHAINING=true) or uninstall, so a
#                              primary CNI that rewrites its conflist on restart
#                              gets Sluice appended again. SIGTERM leaves the
#                              chain as it is (pods keep their plugin across
#                              a Sluice upgrade).
#
# Environment (defaults are the DaemonSet's mounts):
#   CNI_NET_DIR              /host/etc/cni/net.d
#   CNI_BIN_DIR              /host/opt/cni/bin
#   SLUICE_CNI_BIN           /opt/sluice/cni/sluice   (the plugin in the image)
#   SLUICE_CNI_PLUGIN_CONF   {"type":"sluice"}        (the entry appended)
#   SLUICE_CNI_CHAINING      false
#   SLUICE_CNI_RECHECK_SECONDS 10
set -eu

here=$(cd "$(dirname "$0")" && pwd)
net_dir=${CNI_NET_DIR:-/host/etc/cni/net.d}
bin_dir=${CNI_BIN_DIR:-/host/opt/cni/bin}
plugin_bin=${SLUICE_CNI_BIN:-/opt/sluice/cni/sluice}
plugin_conf=${SLUICE_CNI_PLUGIN_CONF:-'{"type":"sluice"}'}
recheck=${SLUICE_CNI_RECHECK_SECONDS:-10}

log() { echo "install-cni: $*"; }

# Copy the binary under a temporary name and rename it: a runtime that
# executes the plugin meanwhile sees the old file or the new one, never half.
install_binary() {
  [ -x "$plugin_bin" ] || { log "plugin binary $plugin_bin is missing or not executable" >&2; return 1; }
  mkdir -p "$bin_dir"
  if cmp -s "$plugin_bin" "$bin_dir/sluice"; then return 0; fi
  cp "$plugin_bin" "$bin_dir/.sluice.tmp"
  chmod 0755 "$bin_dir/.sluice.tmp"
  mv -f "$bin_dir/.sluice.tmp" "$bin_dir/sluice"
  log "installed $bin_dir/sluice"
}

install() {
  # Explicit returns: `watch` calls this inside `if`, where set -e is off.
  install_binary || return 1
  out=$(node "$here/conflist.js" insert "$net_dir" "$plugin_conf") || return 1
  log "$out"
}

uninstall() {
  out=$(node "$here/conflist.js" remove "$net_dir") || return 1
  log "$out"
  # The binary stays by default: pods created with Sluice in their chain need
  # it for their CNI DEL when they are deleted.
  if [ "${1:-}" = "--purge" ] && [ -e "$bin_dir/sluice" ]; then
    rm -f "$bin_dir/sluice"
    log "removed $bin_dir/sluice"
  fi
}

watch() {
  trap 'log "stopping; the CNI configuration stays as it is"; exit 0' TERM INT
  last=""
  while :; do
    if [ "${SLUICE_CNI_CHAINING:-false}" = true ]; then
      # Quiet while nothing changes: log only a different outcome.
      if out=$(install 2>&1); then state="ok: $out"; else state="waiting: $out"; fi
    else
      out=$(uninstall 2>&1) || true
      state="chaining disabled: $out"
    fi
    [ "$state" = "$last" ] || { echo "$state"; last=$state; }
    sleep "$recheck" &
    wait $! || true
  done
}

case "${1:-}" in
  install) install ;;
  uninstall) shift; uninstall "$@" ;;
  watch) watch ;;
  *) echo "usage: $0 install | uninstall [--purge] | watch" >&2; exit 2 ;;
esac
