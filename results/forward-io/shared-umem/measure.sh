#!/bin/bash
# CPU per forwarded frame of the forwarder on the single-router lab, AF_XDP ports:
# ./measure.sh true|false|old SIZE [RATE] from the repository root (root needed).
# true/false: [io] shared_umem; old: $TESSERA_OLD, a binary of before the shared UMEM
# (frames copied in on receipt and out on transmit). The XDP generator offers RATE
# (default 150kpps) of SIZE-byte frames in 16 flows from src1 to sink1 for 9 s; over 5 s
# of it, the forwarder process's user and system CPU time (/proc/PID/stat) per frame it
# forwarded.
set -u
B=${TESSERA:-$PWD/target/release/tessera}; [ "$1" = old ] && B=$TESSERA_OLD
d=${TMPDIR:-/tmp}/umem-cost-$1; rm -rf $d; mkdir -p $d/single-router
cp $PWD/labs/single-router/routes.txt $d/single-router/
cp $PWD/labs/single-router/r.toml $d/single-router/r.toml
[ "$1" = old ] || printf "\n[io]\nshared_umem = %s\n" "$1" >> $d/single-router/r.toml
sed 's/^name = "sr"/name = "pl'$1'"/' $PWD/labs/single-router.toml > $d/lab.toml
$B lab up $d/lab.toml --io xdp >/dev/null 2>&1 || { echo "lab up failed"; exit 1; }
trap "$B lab down $d/lab.toml >/dev/null 2>&1" EXIT
pid=$(pgrep -f "forwarder.*$d" | head -1)
$B lab exec $d/lab.toml src1 -- ping -c1 -W2 10.3.0.10 >/dev/null
rmac=$($B lab exec $d/lab.toml r -- cat /sys/class/net/r-eth0/address)
$B lab exec $d/lab.toml src1 -- ethtool -K eth0 gro on >/dev/null 2>&1
$B lab exec $d/lab.toml src1 -- $B gen --iface eth0 --dst-mac $rmac --src 10.1.0.10 --dst 10.3.0.10 --flows 16 --size $2 --rate ${3:-150kpps} --duration 9 --xdp --json > $d/gen.json 2>&1 &
sleep 2
f0=$($B show counters --control /run/tessera/pl$1/r.sock | python3 -c "import json,sys; print(json.load(sys.stdin)['events']['ip4_forwarded'])")
u0=$(awk '{print $14}' /proc/$pid/stat); s0=$(awk '{print $15}' /proc/$pid/stat)
sleep 5
u1=$(awk '{print $14}' /proc/$pid/stat); s1=$(awk '{print $15}' /proc/$pid/stat)
f1=$($B show counters --control /run/tessera/pl$1/r.sock | python3 -c "import json,sys; print(json.load(sys.stdin)['events']['ip4_forwarded'])")
python3 -c "
n=($f1-$f0)
print('STAT shared=$1 size=$2 fwd/s %.0f user us/pkt %.3f sys us/pkt %.3f'%(n/5, ($u1-$u0)*1e4/n, ($s1-$s0)*1e4/n))"
wait
$B show counters --control /run/tessera/pl$1/r.sock 2>/dev/null | python3 -c "import json,sys; c=json.load(sys.stdin); e=c['events']; print('forwarded',e['ip4_forwarded'],'in_place',e['xsk_tx_in_place'],'copied',e['xsk_tx_copied'])" || true
python3 -c "import json; d=json.load(open('$d/gen.json')); print('gen sent', d['sent'], 'pps', d['achieved_pps'])" 2>/dev/null || tail -3 $d/gen.json
