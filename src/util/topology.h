/* Machine topology (hwloc): the public xfer_topology* calls, and pinning a
 * thread near a NIC for the worker. */
#ifndef XFER_UTIL_TOPOLOGY_H
#define XFER_UTIL_TOPOLOGY_H

/* Pins the calling thread to the cores of the named interface's NUMA node;
 * returns the first such CPU, or -ENODEV / -EOPNOTSUPP (no hwloc). */
int xi_topology_pin_near(const char *ifname);

#endif
