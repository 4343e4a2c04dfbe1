/* Node discovery with hwloc 2 (I/O filter on). Debian's hwloc has no CUDA or NVML plugin,
 * so GPUs are PCI objects and NVLink is invisible here. */
#include "topo/node.h"

#include "include/base/error.h"

#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VENDOR_NVIDIA 0x10de
#define VENDOR_AMAZON 0x1d0f

const char *dcp_path_name(dcp_path_t path)
{
    static const char *names[DCP_PATH_COUNT] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
    return (unsigned)path < DCP_PATH_COUNT ? names[path] : "?";
}

dcp_nic_kind_t dcp_node_nic_kind(const dcp_node_topo_t *node)
{
    dcp_nic_kind_t best = DCP_NIC_ETH;
    for (int32_t k = 0; k < node->num_nics; k++)
        if (node->nics[k].kind < best) best = node->nics[k].kind;
    return best;
}

const char *dcp_nic_kind_name(dcp_nic_kind_t kind)
{
    static const char *names[DCP_NIC_KIND_COUNT] = {"efa", "ib", "eth"};
    return (unsigned)kind < DCP_NIC_KIND_COUNT ? names[kind] : "?";
}

const char *dcp_nic_fabric(const dcp_nic_info_t *nic)
{
    if (nic->kind == DCP_NIC_EFA || nic->link_layer == DCP_LINK_LAYER_EFA) return "EFA";
    if (nic->kind == DCP_NIC_ETH) return "Ethernet";
    switch (nic->link_layer) {
    case DCP_LINK_LAYER_INFINIBAND:
        return "InfiniBand";
    case DCP_LINK_LAYER_ETHERNET:
        return "RoCE";
    default:
        return "unknown";
    }
}

int32_t dcp_node_nic_users(const dcp_node_topo_t *node, int32_t k)
{
    int32_t users = 0;
    for (int32_t g = 0; g < node->num_gpus; g++)
        for (int32_t i = 0; i < node->gpus[g].num_nics; i++) users += node->gpus[g].nics[i] == k;
    return users;
}

static void busid_of(hwloc_obj_t pci, char *buf, size_t n)
{
    snprintf(buf, n, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
             pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

static int32_t numa_of(hwloc_topology_t t, hwloc_obj_t obj)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, obj);
    return anc && anc->nodeset ? hwloc_bitmap_first(anc->nodeset) : -1;
}

static int is_bridge(hwloc_obj_t o)
{
    return o->type == HWLOC_OBJ_BRIDGE;
}

/* The path class of two PCI devices, by walking both ancestor chains (hwloc's common
 * ancestor helper is not meant for I/O objects). */
static dcp_path_t classify(hwloc_topology_t t, hwloc_obj_t a, hwloc_obj_t b)
{
    int hops_a = 0;
    for (hwloc_obj_t x = a->parent; x; x = x->parent) {
        int hops_b = 0;
        for (hwloc_obj_t y = b->parent; y; y = y->parent) {
            if (x == y) {
                if (!is_bridge(x)) { /* met above the PCI trees */
                    hwloc_obj_t na = hwloc_get_non_io_ancestor_obj(t, a);
                    hwloc_obj_t nb = hwloc_get_non_io_ancestor_obj(t, b);
                    return na && nb && hwloc_bitmap_intersects(na->nodeset, nb->nodeset)
                               ? DCP_PATH_NODE
                               : DCP_PATH_SYS;
                }
                if (x->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) return DCP_PATH_PHB;
                return hops_a <= 1 && hops_b <= 1 ? DCP_PATH_PIX : DCP_PATH_PXB;
            }
            hops_b += is_bridge(y);
        }
        hops_a += is_bridge(x);
    }
    return DCP_PATH_SYS;
}

/* Reads the first number of a sysfs file ("400 Gb/sec (4X NDR)", "25000"). */
static double sysfs_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    double v = 0;
    if (fscanf(f, "%lf", &v) != 1) v = 0;
    fclose(f);
    return v > 0 ? v : 0;
}

static void nic_speed(dcp_nic_info_t *n)
{
    char path[256];
    if (n->kind != DCP_NIC_ETH) {
        snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/rate", n->name);
        n->link_gbps = sysfs_number(path);
    }
    if (n->link_gbps == 0 && n->netdev[0]) {
        snprintf(path, sizeof path, "/sys/class/net/%s/speed", n->netdev);
        n->link_gbps = sysfs_number(path) / 1000.0; /* Mb/s */
    }
}

/* A live port's link layer, from sysfs ("InfiniBand", "Ethernet", "Unspecified" on EFA). */
static dcp_link_layer_t live_link_layer(const char *name)
{
    char path[256], text[32] = "";
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/link_layer", name);
    FILE *f = fopen(path, "r");
    if (!f) return DCP_LINK_LAYER_UNKNOWN;
    const int ok = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!ok) return DCP_LINK_LAYER_UNKNOWN;
    if (!strncmp(text, "InfiniBand", 10)) return DCP_LINK_LAYER_INFINIBAND;
    if (!strncmp(text, "Ethernet", 8)) return DCP_LINK_LAYER_ETHERNET;
    return DCP_LINK_LAYER_UNKNOWN;
}

/* A captured port's link layer, from what hwloc records of it: a LID other than 0 is given
 * by an InfiniBand subnet manager; a RoCE port has LID 0 (or none) beside its GIDs; failing
 * both, the length of its network interface's hardware address (20 bytes for IPoIB, 6 for
 * Ethernet). */
static dcp_link_layer_t captured_link_layer(hwloc_obj_t ofed, const char *netdev_address)
{
    const char *lid = hwloc_obj_get_info_by_name(ofed, "Port1LID");
    const char *gid = hwloc_obj_get_info_by_name(ofed, "Port1GID0");
    if (lid && strtoul(lid, NULL, 0) != 0) return DCP_LINK_LAYER_INFINIBAND;
    if (lid || gid) return DCP_LINK_LAYER_ETHERNET;
    if (netdev_address) {
        int colons = 0;
        for (const char *c = netdev_address; *c; c++) colons += *c == ':';
        if (colons == 19) return DCP_LINK_LAYER_INFINIBAND;
        if (colons == 5) return DCP_LINK_LAYER_ETHERNET;
    }
    return DCP_LINK_LAYER_UNKNOWN;
}

static hwloc_obj_t pci_parent(hwloc_obj_t osdev)
{
    hwloc_obj_t p = osdev->parent;
    return p && p->type == HWLOC_OBJ_PCI_DEVICE ? p : NULL;
}

/* NICs: OpenFabrics devices, then network interfaces of PCI devices that have none; then the
 * link layer of each. */
static dcp_status_t find_nics(hwloc_topology_t t, int live, dcp_node_topo_t *n, hwloc_obj_t *objs)
{
    hwloc_obj_t ofed_of[DCP_NODE_MAX_DEVS] = {NULL}, net_of[DCP_NODE_MAX_DEVS] = {NULL};
    for (int pass = 0; pass < 2; pass++)
        for (hwloc_obj_t o = hwloc_get_next_osdev(t, NULL); o; o = hwloc_get_next_osdev(t, o)) {
            hwloc_obj_t pci = pci_parent(o);
            const int ofed = o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
            const int net = o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK;
            if (!pci || (pass == 0 && !ofed) || (pass == 1 && !net)) continue;
            int32_t k = 0;
            while (k < n->num_nics && objs[k] != pci) k++;
            if (k < n->num_nics) { /* the network interface of an RDMA NIC already found */
                if (net && !n->nics[k].netdev[0]) {
                    snprintf(n->nics[k].netdev, sizeof n->nics[k].netdev, "%s", o->name);
                    net_of[k] = o;
                }
                continue;
            }
            if (n->num_nics == DCP_NODE_MAX_DEVS)
                return dcp_set_error(DCP_ERR_UNSUPPORTED, "topo: more than %d NICs",
                                     DCP_NODE_MAX_DEVS);
            dcp_nic_info_t *nic = &n->nics[n->num_nics];
            memset(nic, 0, sizeof *nic);
            snprintf(nic->name, sizeof nic->name, "%s", o->name ? o->name : "?");
            if (net) snprintf(nic->netdev, sizeof nic->netdev, "%s", o->name ? o->name : "");
            busid_of(pci, nic->busid, sizeof nic->busid);
            nic->kind = !ofed                                          ? DCP_NIC_ETH
                        : pci->attr->pcidev.vendor_id == VENDOR_AMAZON ? DCP_NIC_EFA
                                                                       : DCP_NIC_IB;
            nic->numa = numa_of(t, pci);
            nic->pci_gbps = pci->attr->pcidev.linkspeed;
            if (live) nic_speed(nic);
            if (ofed) ofed_of[n->num_nics] = o;
            objs[n->num_nics++] = pci;
        }
    for (int32_t k = 0; k < n->num_nics; k++) {
        dcp_nic_info_t *nic = &n->nics[k];
        if (nic->kind == DCP_NIC_EFA)
            nic->link_layer = DCP_LINK_LAYER_EFA;
        else if (nic->kind == DCP_NIC_ETH)
            nic->link_layer = DCP_LINK_LAYER_ETHERNET;
        else
            nic->link_layer =
                live ? live_link_layer(nic->name)
                     : captured_link_layer(
                           ofed_of[k],
                           net_of[k] ? hwloc_obj_get_info_by_name(net_of[k], "Address") : NULL);
    }
    return DCP_OK;
}

static int is_gpu(hwloc_obj_t pci)
{
    const unsigned cls = pci->attr->pcidev.class_id >> 8; /* base class: 0x03 display */
    return pci->attr->pcidev.vendor_id == VENDOR_NVIDIA && cls == 0x03;
}

static dcp_status_t find_gpus(hwloc_topology_t t, const char *const *busids, int32_t nb,
                              dcp_node_topo_t *n, hwloc_obj_t *objs)
{
    if (busids) {
        for (int32_t i = 0; i < nb; i++) {
            hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(t, busids[i]);
            if (!pci)
                return dcp_set_error(DCP_ERR_INVALID_ARG,
                                     "topo: GPU bus id '%s' is not in the topology", busids[i]);
            /* display (0x03) or processing accelerator (0x12): a NIC or a bridge is no GPU */
            const unsigned cls = pci->attr->pcidev.class_id >> 8;
            if (cls != 0x03 && cls != 0x12)
                return dcp_set_error(DCP_ERR_INVALID_ARG,
                                     "topo: bus id '%s' is a PCI device of class 0x%04x, not a "
                                     "GPU (class 0x03xx or 0x12xx)",
                                     busids[i], pci->attr->pcidev.class_id);
            for (int32_t k = 0; k < n->num_gpus; k++)
                if (objs[k] == pci)
                    return dcp_set_error(DCP_ERR_INVALID_ARG,
                                         "topo: GPU bus id '%s' is listed twice (GPUs %d and %d)",
                                         busids[i], k, i);
            objs[n->num_gpus++] = pci;
        }
    } else {
        for (hwloc_obj_t p = hwloc_get_next_pcidev(t, NULL); p; p = hwloc_get_next_pcidev(t, p))
            if (is_gpu(p) && n->num_gpus < DCP_NODE_MAX_DEVS) objs[n->num_gpus++] = p;
        /* bus order, as CUDA enumerates with CUDA_DEVICE_ORDER=PCI_BUS_ID */
        for (int32_t i = 1; i < n->num_gpus; i++)
            for (int32_t j = i; j > 0; j--) {
                char a[16], b[16];
                busid_of(objs[j - 1], a, sizeof a);
                busid_of(objs[j], b, sizeof b);
                if (strcmp(a, b) <= 0) break;
                hwloc_obj_t tmp = objs[j];
                objs[j] = objs[j - 1];
                objs[j - 1] = tmp;
            }
    }
    for (int32_t i = 0; i < n->num_gpus; i++) {
        busid_of(objs[i], n->gpus[i].busid, sizeof n->gpus[i].busid);
        n->gpus[i].numa = numa_of(t, objs[i]);
        n->gpus[i].nic = -1;
        n->gpus[i].pci_gbps = objs[i]->attr->pcidev.linkspeed;
    }
    return DCP_OK;
}

/* Gives NIC k to GPU g (NICs kept nearest first). */
static void give(dcp_node_topo_t *n, int32_t g, int32_t k, dcp_path_t path)
{
    dcp_gpu_info_t *x = &n->gpus[g];
    if (x->num_nics == DCP_GPU_MAX_NICS) return;
    x->nics[x->num_nics++] = k;
    if (x->nic < 0 || path < x->nic_path) {
        x->nic = k;
        x->nic_path = path;
    }
}

/* NICs to GPUs (dcp_node_discover). Candidates are the RDMA NICs where the node has any, else
 * every NIC. First each candidate NIC joins the GPU nearest to it among the GPUs it is a
 * nearest NIC of (ties: the GPU with fewest NICs so far, then the lower index); then each GPU
 * still without one shares its nearest NIC that the fewest GPUs use. */
static void choose_nics(hwloc_topology_t t, dcp_node_topo_t *n, hwloc_obj_t *gpu, hwloc_obj_t *nic)
{
    int rdma = 0;
    int32_t users[DCP_NODE_MAX_DEVS] = {0};
    dcp_path_t best[DCP_NODE_MAX_DEVS];
    dcp_path_t path[DCP_NODE_MAX_DEVS][DCP_NODE_MAX_DEVS]; /* 16 KB */
    for (int32_t k = 0; k < n->num_nics; k++) rdma |= n->nics[k].kind != DCP_NIC_ETH;
#define CANDIDATE(k) (!rdma || n->nics[k].kind != DCP_NIC_ETH)
    for (int32_t g = 0; g < n->num_gpus; g++) {
        best[g] = DCP_PATH_COUNT;
        for (int32_t k = 0; k < n->num_nics; k++) {
            if (!CANDIDATE(k)) continue;
            path[g][k] = classify(t, gpu[g], nic[k]);
            if (path[g][k] < best[g]) best[g] = path[g][k];
        }
    }
    for (int32_t k = 0; k < n->num_nics; k++) {
        if (!CANDIDATE(k)) continue;
        int32_t to = -1;
        for (int32_t g = 0; g < n->num_gpus; g++) {
            if (path[g][k] != best[g]) continue;
            if (to < 0 || path[g][k] < path[to][k] ||
                (path[g][k] == path[to][k] && n->gpus[g].num_nics < n->gpus[to].num_nics))
                to = g;
        }
        if (to >= 0 && n->gpus[to].num_nics < DCP_GPU_MAX_NICS) {
            give(n, to, k, path[to][k]);
            users[k]++;
        }
    }
    for (int32_t g = 0; g < n->num_gpus; g++) {
        if (n->gpus[g].num_nics > 0) continue;
        int32_t pick = -1;
        for (int32_t k = 0; k < n->num_nics; k++)
            if (CANDIDATE(k) && path[g][k] == best[g] && (pick < 0 || users[k] < users[pick]))
                pick = k;
        if (pick >= 0) {
            give(n, g, pick, path[g][pick]);
            users[pick]++;
        }
    }
#undef CANDIDATE
}

/* hwloc's PCI discovery goes through libpciaccess, whose global state is not thread-safe:
 * ranks that are threads of one process load their topologies one at a time. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static dcp_status_t load_locked(hwloc_topology_t *t, const char *xml_path)
{
    if (hwloc_topology_init(t) != 0)
        return dcp_set_error(DCP_ERR_SYSTEM, "topo: hwloc_topology_init failed");
    hwloc_topology_set_io_types_filter(*t, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (xml_path && hwloc_topology_set_xml(*t, xml_path) != 0) {
        hwloc_topology_destroy(*t);
        return dcp_set_error(DCP_ERR_INVALID_ARG, "topo: cannot read hwloc XML '%s'", xml_path);
    }
    if (hwloc_topology_load(*t) != 0) {
        hwloc_topology_destroy(*t);
        return dcp_set_error(xml_path ? DCP_ERR_INVALID_ARG : DCP_ERR_SYSTEM,
                             "topo: hwloc cannot load %s%s", xml_path ? "XML " : "the machine",
                             xml_path ? xml_path : "");
    }
    return DCP_OK;
}

static dcp_status_t load(hwloc_topology_t *t, const char *xml_path)
{
    pthread_mutex_lock(&load_lock);
    const dcp_status_t st = load_locked(t, xml_path);
    pthread_mutex_unlock(&load_lock);
    return st;
}

dcp_status_t dcp_node_discover(const char *xml_path, const char *const *busids, int32_t num_busids,
                               dcp_node_topo_t *node_out)
{
    if (!node_out) return dcp_set_error(DCP_ERR_INVALID_ARG, "topo: node_out is NULL");
    if (busids && (num_busids < 0 || num_busids > DCP_NODE_MAX_DEVS))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "topo: %d GPU bus ids; at most %d", num_busids,
                             DCP_NODE_MAX_DEVS);
    hwloc_topology_t t;
    DCP_CHECK(load(&t, xml_path));
    dcp_node_topo_t *n = NULL;
    hwloc_obj_t *gpu = NULL, *nic = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&n, 1, sizeof *n, "topo"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&gpu, DCP_NODE_MAX_DEVS, sizeof *gpu, "topo"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&nic, DCP_NODE_MAX_DEVS, sizeof *nic, "topo"), st, out);
    const char *host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t), "HostName");
    snprintf(n->hostname, sizeof n->hostname, "%s", host ? host : "localhost");
    DCP_CHECK_GOTO(find_gpus(t, busids, num_busids, n, gpu), st, out);
    DCP_CHECK_GOTO(find_nics(t, xml_path == NULL, n, nic), st, out);
    choose_nics(t, n, gpu, nic);
    for (int32_t a = 0; a < n->num_gpus; a++)
        for (int32_t b = 0; b < n->num_gpus; b++)
            n->gpu_path[a][b] = a == b ? DCP_PATH_PIX : classify(t, gpu[a], gpu[b]);
    *node_out = *n;
    st = DCP_OK;
out:
    free(n);
    free(gpu);
    free(nic);
    hwloc_topology_destroy(t);
    return st;
}
