/* rc_peer: an RC exchange written against the system <infiniband/verbs.h> and linked with
 * -libverbs, exactly as an application for real hardware would be. Run with libbx_simnic.so
 * preloaded, it proves the simnic implements the ABI, not a look-alike.
 *
 *   rc_peer both                 two devices in one process (bxsim0 <-> bxsim1)
 *   rc_peer server|client FD     one side each, in two processes; FD is one end of a socketpair
 *                                over which they swap QP number, GID, buffer address and rkey,
 *                                as ibv_rc_pingpong does over TCP.
 *
 * The client writes SIZE random bytes into the server's buffer with RDMA WRITE and then a final
 * fragment with WRITE_WITH_IMM carrying a checksum; the server checks the bytes on the receive
 * completion and answers with a SEND of its own checksum, which the client verifies. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIZE (4u << 20)
#define FRAGMENT (1u << 20)

struct peer_info {
  uint32_t qpn;
  union ibv_gid gid;
  uint64_t addr;
  uint32_t rkey;
};

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t* buf;
  struct peer_info me;
};

static int fail(const char* what) {
  fprintf(stderr, "rc_peer: %s failed\n", what);
  exit(1);
}

static uint32_t checksum(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

static void open_side(struct side* s, const char* name) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list) fail("ibv_get_device_list");
  for (int i = 0; i < n; ++i)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) s->ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  if (!s->ctx) fail("ibv_open_device");
  struct ibv_port_attr port;
  if (ibv_query_port(s->ctx, 1, &port) || port.state != IBV_PORT_ACTIVE) fail("ibv_query_port");
  if (ibv_query_gid(s->ctx, 1, 0, &s->me.gid)) fail("ibv_query_gid");
  s->pd = ibv_alloc_pd(s->ctx);
  s->buf = aligned_alloc(4096, SIZE);
  s->mr = ibv_reg_mr(s->pd, s->buf, SIZE,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!s->pd || !s->mr) fail("ibv_reg_mr");
  s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
  struct ibv_qp_init_attr init = {
      .send_cq = s->cq,
      .recv_cq = s->cq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
  s->qp = ibv_create_qp(s->pd, &init);
  if (!s->cq || !s->qp) fail("ibv_create_qp");
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(s->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    fail("modify to INIT");
  s->me.qpn = s->qp->qp_num;
  s->me.addr = (uintptr_t)s->buf;
  s->me.rkey = s->mr->rkey;
}

static void connect_side(struct side* s, const struct peer_info* remote) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = IBV_MTU_4096,
      .dest_qp_num = remote->qpn,
      .rq_psn = 0,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = 12,
      .ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = remote->gid, .hop_limit = 1}}};
  if (ibv_modify_qp(s->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    fail("modify to RTR");
  struct ibv_qp_attr b = {.qp_state = IBV_QPS_RTS,
                          .timeout = 14,
                          .retry_cnt = 7,
                          .rnr_retry = 7,
                          .sq_psn = 0,
                          .max_rd_atomic = 1};
  if (ibv_modify_qp(s->qp, &b,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    fail("modify to RTS");
}

static struct ibv_wc wait_one(struct side* s) {
  struct ibv_wc wc;
  for (long spins = 0; spins < 2000000000L; ++spins) {
    int n = ibv_poll_cq(s->cq, 1, &wc);
    if (n < 0) fail("ibv_poll_cq");
    if (n == 1) {
      if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "rc_peer: completion error: %s\n", ibv_wc_status_str(wc.status));
        exit(1);
      }
      return wc;
    }
    if (spins % 1024 == 0) usleep(10);
  }
  fail("completion (timeout)");
  return wc;
}

static void post_recv(struct side* s, uint32_t length) {
  struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = length, .lkey = s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = length ? 1 : 0}, *bad;
  if (ibv_post_recv(s->qp, &wr, &bad)) fail("ibv_post_recv");
}

/* The client side: fragments written to p, p+S, ..., the last one WRITE_WITH_IMM. */
static void client_run(struct side* c, const struct peer_info* server) {
  srand(42);
  for (uint32_t i = 0; i < SIZE; ++i) c->buf[i] = (uint8_t)rand();
  uint32_t sum = checksum(c->buf, SIZE);
  post_recv(c, 64); /* for the server's answer */
  for (uint32_t off = 0; off < SIZE; off += FRAGMENT) {
    int last = off + FRAGMENT >= SIZE;
    struct ibv_sge sge = {.addr = (uintptr_t)c->buf + off, .length = FRAGMENT, .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = off,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                             .send_flags = last ? IBV_SEND_SIGNALED : 0,
                             .imm_data = htonl(sum),
                             .wr.rdma = {.remote_addr = server->addr + off, .rkey = server->rkey}};
    struct ibv_send_wr* bad;
    if (ibv_post_send(c->qp, &wr, &bad)) fail("ibv_post_send");
  }
  struct ibv_wc wc = wait_one(c);
  if (wc.opcode != IBV_WC_RDMA_WRITE) fail("write completion opcode");
  wc = wait_one(c);
  if (wc.opcode != IBV_WC_RECV || wc.byte_len != 4) fail("answer");
  uint32_t answer;
  memcpy(&answer, c->buf, 4);
  if (ntohl(answer) != sum) fail("server checksum");
  printf("client: wrote %u bytes in %u fragments, server confirmed checksum %08x\n", SIZE,
         SIZE / FRAGMENT, sum);
}

static void server_wait_and_answer(struct side* s) {
  struct ibv_wc wc = wait_one(s);
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM))
    fail("WRITE_WITH_IMM completion");
  uint32_t sum = checksum(s->buf, SIZE);
  if (sum != ntohl(wc.imm_data)) fail("payload checksum");
  uint32_t answer = htonl(sum);
  struct ibv_sge sge = {.addr = (uintptr_t)&answer, .length = 4, .lkey = 0};
  struct ibv_send_wr wr = {.wr_id = 9,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE},
                     *bad;
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  ibv_query_qp(s->qp, &attr, IBV_QP_CAP, &init);
  if (ibv_post_send(s->qp, &wr, &bad)) {
    /* no inline support configured: fall back to a registered buffer */
    memcpy(s->buf, &answer, 4);
    sge.addr = (uintptr_t)s->buf;
    sge.lkey = s->mr->lkey;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(s->qp, &wr, &bad)) fail("ibv_post_send answer");
  }
  wait_one(s);
  printf("server: received %u bytes, checksum %08x matches the immediate\n", SIZE, sum);
}

static void* server_main(void* arg) {
  server_wait_and_answer((struct side*)arg);
  return NULL;
}

static void exchange(int fd, const struct peer_info* mine, struct peer_info* theirs) {
  if (write(fd, mine, sizeof(*mine)) != sizeof(*mine)) fail("send info");
  if (read(fd, theirs, sizeof(*theirs)) != sizeof(*theirs)) fail("receive info");
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "both") == 0) {
    struct side srv = {0}, cli = {0};
    open_side(&srv, "bxsim0");
    open_side(&cli, "bxsim1");
    connect_side(&srv, &cli.me);
    connect_side(&cli, &srv.me);
    post_recv(&srv, 0);
    pthread_t server_thread;
    pthread_create(&server_thread, NULL, server_main, &srv);
    client_run(&cli, &srv.me);
    pthread_join(server_thread, NULL);
    return 0;
  }
  if (argc < 3) {
    fprintf(stderr, "usage: rc_peer both | server FD | client FD\n");
    return 2;
  }
  int fd = atoi(argv[2]);
  struct side s = {0};
  struct peer_info remote;
  open_side(&s, "bxsim0");
  exchange(fd, &s.me, &remote);
  connect_side(&s, &remote);
  if (strcmp(argv[1], "server") == 0) {
    post_recv(&s, 0);
    char ready = 'r';
    if (write(fd, &ready, 1) != 1) fail("ready");
    server_wait_and_answer(&s);
  } else {
    char ready;
    if (read(fd, &ready, 1) != 1) fail("wait ready");
    client_run(&s, &remote);
  }
  return 0;
}
