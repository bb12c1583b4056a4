#!/bin/sh
# Pins each cable's neighbour entries inside the rxe VM (rdma-suite.sh,
# rdma-cores.sh). Creating a RoCE address handle resolves the peer's MAC in
# the kernel, synchronously; in this VM the first ARP exchange sometimes
# waits for a retransmit (create_ah took 1.02 s), which the fault cases'
# 0.5 s heartbeat allowance cannot absorb. Real fabrics see the same
# first-contact cost (docs/design.md §14).
i=0
while [ -e /sys/class/net/rxenet$((i + 1)) ]; do
	a=rxenet$i b=rxenet$((i + 1)) p=$((i / 2))
	ip neigh replace 198.18.$p.2 lladdr "$(cat /sys/class/net/$b/address)" dev $a nud permanent
	ip neigh replace 198.18.$p.1 lladdr "$(cat /sys/class/net/$a/address)" dev $b nud permanent
	i=$((i + 2))
done
