/*
 * The NCCL engine: device buffers between GPUs, one rank per GPU. The communicator is
 * created from a unique id shared over the bootstrap (ncclCommInitRankConfig, non-blocking
 * so that a wait can give up), or lent by an embedding caller. Each launch is one group of
 * ncclSend/ncclRecv on the engine's stream; NCCL matches point-to-point messages by order,
 * so every launch issues, per peer and direction, its operations in tag order (both sides
 * of a transfer hold the same tag). NCCL is loaded at run time (libnccl.so.2, or
 * $DCP_NCCL_LIB), so that dcp builds and runs where it is absent.
 */
#ifndef DCP_TRANSPORT_NCCL_H
#define DCP_TRANSPORT_NCCL_H

#include "transport/engine.h"
#include "transport/peers.h"

#include <stddef.h>

/* Collective over the bootstrap. `device` is this rank's CUDA device; ranks of one host
 * that name the same GPU get DCP_ERR_UNSUPPORTED (NCCL needs one rank per GPU). With
 * `lent_comm` (an ncclComm_t of the same ranks) no communicator is created and none is
 * destroyed; with `lent_stream` (a cudaStream_t of `device`) the sends and receives run on
 * it and none is created. DCP_ERR_UNSUPPORTED without CUDA in the build, a device, or
 * libnccl. The engine is stream-ordered: launches wait for their ops' ready events on the
 * GPU, and wait() with a stream returns at once. It moves device memory only and carries no
 * notices of its own (host_stamps 0): the context's call stamps, in device memory, carry
 * them (plugin/stamp.h). */
dcp_status_t dcp_nccl_engine_create(const dcp_bootstrap_t *bootstrap, int device, void *lent_comm,
                                    void *lent_stream, dcp_engine_t **engine_out);

/* The same with the job's peer table (its device column set: dcp_peers_set_device), which
 * the engine then does not gather again (NULL: as dcp_nccl_engine_create), and the context's
 * timeout: how long communicator set-up, a launch's connection and finalisation may take
 * (0: the bootstrap's, as dcp_nccl_engine_create takes). A lent communicator is checked on
 * every rank at once (transport/lent.h) before anything is sent on it. */
dcp_status_t dcp_nccl_engine_create_on(const dcp_bootstrap_t *bootstrap,
                                       const dcp_peer_table_t *peers, int device, void *lent_comm,
                                       void *lent_stream, double timeout_s,
                                       dcp_engine_t **engine_out);

/* Tests: a communicator of one rank on `device`, as a framework would lend it, and its
 * destruction (the handle keeps NCCL loaded meanwhile). DCP_ERR_UNSUPPORTED without CUDA, a
 * device or libnccl. */
typedef struct dcp_nccl_test_comm dcp_nccl_test_comm_t;
dcp_status_t dcp_nccl_test_comm_create(int device, void **comm_out,
                                       dcp_nccl_test_comm_t **handle_out);
void dcp_nccl_test_comm_destroy(dcp_nccl_test_comm_t *handle);

/* The PCI bus id of CUDA device `device` (the peer table's GPU column);
 * DCP_ERR_UNSUPPORTED without CUDA. */
dcp_status_t dcp_nccl_gpu_busid(int device, char *busid, size_t capacity);

#endif
