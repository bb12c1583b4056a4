/* Topology: which NICs and GPUs the machine has, on which NUMA node and PCI
 * path, and which NICs belong with which GPU. hwloc does the discovery (it
 * reads sysfs and PCI for us, and knows NUMA locality); without hwloc the
 * engine still works, only unpinned and without grouping. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "util/limits.h"
#include "util/log.h"
#include "util/topology.h"
#include "xfer.h"

#ifdef XFER_HAVE_HWLOC
#include <hwloc.h>

static int numa_of(hwloc_topology_t t, hwloc_obj_t obj)
{
	hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, obj);
	if (!anc || !anc->nodeset || hwloc_bitmap_weight(anc->nodeset) != 1)
		return -1;
	return hwloc_bitmap_first(anc->nodeset);
}

static hwloc_obj_t pci_of(hwloc_obj_t obj)
{
	while (obj && obj->type != HWLOC_OBJ_PCI_DEVICE)
		obj = obj->parent;
	return obj;
}

static int load(hwloc_topology_t *t)
{
	if (hwloc_topology_init(t))
		return -ENOMEM;
	hwloc_topology_set_io_types_filter(*t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (hwloc_topology_load(*t)) {
		hwloc_topology_destroy(*t);
		return -EIO;
	}
	return 0;
}

int xfer_topology(struct xfer_topo_dev *out, int max)
{
	/* (NULL, 0) counts the devices. */
	if (max < 0 || (max > 0 && !out))
		return -EINVAL;
	hwloc_topology_t t;
	int n = 0, ret = load(&t);
	if (ret)
		return ret;
	/* GPUs: PCI display/3D controllers of NVIDIA (class 0x03xx, vendor 0x10de). */
	for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t, o));) {
		bool gpu = (o->attr->pcidev.class_id >> 8) == 0x03 && o->attr->pcidev.vendor_id == 0x10de;
		if (!gpu)
			continue;
		if (n < max) {
			struct xfer_topo_dev *d = &out[n];
			memset(d, 0, sizeof(*d));
			d->kind = XFER_DEV_GPU;
			snprintf(d->name, sizeof(d->name), "gpu%d", n);
			snprintf(d->pci, sizeof(d->pci), "%04x:%02x:%02x.%x", o->attr->pcidev.domain,
				 o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func);
			d->numa = numa_of(t, o);
		}
		n++;
	}
	/* NICs: network and OpenFabrics OS devices hanging off a PCI device. */
	for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(t, o));) {
		if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK &&
		    o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS)
			continue;
		if (n < max) {
			struct xfer_topo_dev *d = &out[n];
			hwloc_obj_t pci = pci_of(o);
			memset(d, 0, sizeof(*d));
			d->kind = XFER_DEV_NIC;
			snprintf(d->name, sizeof(d->name), "%s", o->name);
			if (pci)
				snprintf(d->pci, sizeof(d->pci), "%04x:%02x:%02x.%x", pci->attr->pcidev.domain,
					 pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
			d->numa = numa_of(t, o);
		}
		n++;
	}
	hwloc_topology_destroy(t);
	return n;
}

/* Pins the calling thread to the cores nearest the named interface (its
 * NUMA node); returns the first such CPU, or a negative error. */
int xi_topology_pin_near(const char *ifname)
{
	hwloc_topology_t t;
	int ret = load(&t);
	if (ret)
		return ret;
	ret = -ENODEV;
	for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(t, o));) {
		if (!o->name || strcmp(o->name, ifname) != 0)
			continue;
		hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o);
		if (anc && anc->cpuset && !hwloc_set_cpubind(t, anc->cpuset, HWLOC_CPUBIND_THREAD))
			ret = hwloc_bitmap_first(anc->cpuset);
		break;
	}
	hwloc_topology_destroy(t);
	return ret;
}
#else
int xfer_topology(struct xfer_topo_dev *out, int max)
{
	(void)out, (void)max;
	return -EOPNOTSUPP;
}

int xi_topology_pin_near(const char *ifname)
{
	(void)ifname;
	return -EOPNOTSUPP;
}
#endif

/* A GPU's NICs: those on its NUMA node (all NICs when nothing is known). */
int xfer_topology_nics_for_gpu(int gpu, char *nics, size_t cap)
{
	if (cap && !nics)
		return -EINVAL;
	struct xfer_topo_dev devs[64];
	int n = xfer_topology(devs, 64);
	if (n < 0)
		return n;
	if (n > 64)
		n = 64;
	int g = -1, seen = 0;
	for (int i = 0; i < n; i++)
		if (devs[i].kind == XFER_DEV_GPU && seen++ == gpu)
			g = i;
	if (g < 0)
		return -ENODEV;
	size_t len = 0;
	int count = 0;
	if (cap)
		nics[0] = 0;
	for (int pass = 0; pass < 2 && !count; pass++)
		for (int i = 0; i < n && count < XFER_NIC_MAX; i++) {
			if (devs[i].kind != XFER_DEV_NIC)
				continue;
			if (pass == 0 && (devs[g].numa < 0 || devs[i].numa != devs[g].numa))
				continue;
			int w = snprintf(nics + len, cap > len ? cap - len : 0, "%s%s", count ? "," : "",
					 devs[i].name);
			if (w < 0 || (size_t)w >= cap - len)
				return -ENOSPC;
			len += (size_t)w;
			count++;
		}
	return count;
}
