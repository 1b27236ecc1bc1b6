# Sourced by the sitting scripts: `quiet` waits (up to 120 s) until the
# machine was at least 90% idle over one second, so that a measured run
# does not start while another process still holds the cores.
quiet() {
  local _x u n s i w q sq st t1 t2 i1 i2
  for _ in $(seq 120); do
    read -r _x u n s i w q sq st _x < /proc/stat; t1=$((u+n+s+i+w+q+sq+st)); i1=$i
    sleep 1
    read -r _x u n s i w q sq st _x < /proc/stat; t2=$((u+n+s+i+w+q+sq+st)); i2=$i
    [ $(( (i2 - i1) * 100 / (t2 - t1) )) -ge 90 ] && return 0
  done
}
