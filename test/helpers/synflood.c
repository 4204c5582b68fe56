/* SPDX-License-Identifier: Apache-2.0 */
/*
 * synflood: send TCP SYNs from many spoofed sources out of one device with
 * AF_PACKET, for the conntrack SYN-flood e2e test (test/e2e/tc_synflood.test.ts).
 * Run it only inside a test network namespace: it writes raw frames to the
 * device it is given.
 *
 *   synflood --dev eth0 --src-mac MAC --dst-mac MAC --dst A.B.C.D --dport N
 *            --src-base A.B.C.D --count N [--max-ms N]
 *
 * Source i is (src-base + i % 65536) : (1024 + i / 65536), so every SYN is a
 * new flow. Checksums are complete (the receiver validates them). Stops after
 * --count frames or --max-ms milliseconds, whichever comes first, and prints
 * {"sent":N,"ms":N} on stdout.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define FRAME_LEN (14 + 20 + 20)

static uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static uint32_t csum_add(uint32_t sum, const void *data, size_t len)
{
	const uint8_t *p = data;

	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (len & 1)
		sum += (uint32_t)(p[len - 1] << 8);
	return sum;
}

static int parse_mac(const char *s, uint8_t mac[6])
{
	unsigned int b[6];

	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6)
		return -1;
	for (int i = 0; i < 6; i++)
		mac[i] = (uint8_t)b[i];
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void build(uint8_t *f, const uint8_t src_mac[6], const uint8_t dst_mac[6], uint32_t saddr,
		  uint32_t daddr, uint16_t sport, uint16_t dport, uint32_t seq)
{
	struct iphdr *ip = (struct iphdr *)(f + 14);
	struct tcphdr *tcp = (struct tcphdr *)(f + 34);
	uint8_t pseudo[12];
	uint32_t sum;

	memset(f, 0, FRAME_LEN);
	memcpy(f, dst_mac, 6);
	memcpy(f + 6, src_mac, 6);
	f[12] = 0x08;
	f[13] = 0x00;
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(40);
	ip->id = htons((uint16_t)seq);
	ip->ttl = 64;
	ip->protocol = IPPROTO_TCP;
	ip->saddr = saddr;
	ip->daddr = daddr;
	ip->check = htons(csum_fold(csum_add(0, ip, 20)));
	tcp->source = htons(sport);
	tcp->dest = htons(dport);
	tcp->seq = htonl(seq);
	tcp->doff = 5;
	tcp->syn = 1;
	tcp->window = htons(64240);
	memcpy(pseudo, &saddr, 4);
	memcpy(pseudo + 4, &daddr, 4);
	pseudo[8] = 0;
	pseudo[9] = IPPROTO_TCP;
	pseudo[10] = 0;
	pseudo[11] = 20;
	sum = csum_add(0, pseudo, sizeof(pseudo));
	sum = csum_add(sum, tcp, 20);
	tcp->check = htons(csum_fold(sum));
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	uint8_t src_mac[6] = {0}, dst_mac[6] = {0};
	uint32_t daddr = 0, src_base = 0;
	uint16_t dport = 0;
	long count = 0, max_ms = 60000;
	static uint8_t frames[BATCH][FRAME_LEN];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	struct sockaddr_ll sll = {0};
	uint64_t start;
	long sent = 0;
	int fd;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];

		if (!strcmp(k, "--dev"))
			dev = v;
		else if (!strcmp(k, "--src-mac") && !parse_mac(v, src_mac))
			;
		else if (!strcmp(k, "--dst-mac") && !parse_mac(v, dst_mac))
			;
		else if (!strcmp(k, "--dst") && inet_pton(AF_INET, v, &daddr) == 1)
			;
		else if (!strcmp(k, "--src-base") && inet_pton(AF_INET, v, &src_base) == 1)
			;
		else if (!strcmp(k, "--dport"))
			dport = (uint16_t)atoi(v);
		else if (!strcmp(k, "--count"))
			count = atol(v);
		else if (!strcmp(k, "--max-ms"))
			max_ms = atol(v);
		else {
			fprintf(stderr, "synflood: bad argument %s %s\n", k, v);
			return 2;
		}
	}
	if (!dev || !daddr || !src_base || !dport || count <= 0 || max_ms <= 0) {
		fprintf(stderr, "synflood: need --dev --src-mac --dst-mac --dst --dport --src-base --count\n");
		return 2;
	}
	fd = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: send only, receive nothing */
	if (fd < 0) {
		perror("synflood: socket(AF_PACKET)");
		return 1;
	}
	sll.sll_family = AF_PACKET;
	sll.sll_ifindex = (int)if_nametoindex(dev);
	sll.sll_halen = 6;
	memcpy(sll.sll_addr, dst_mac, 6);
	if (!sll.sll_ifindex) {
		fprintf(stderr, "synflood: no device %s\n", dev);
		return 1;
	}
	start = now_ms();
	while (sent < count && now_ms() - start < (uint64_t)max_ms) {
		int n = 0;

		for (; n < BATCH && sent + n < count; n++) {
			long i = sent + n;
			uint32_t saddr = htonl(ntohl(src_base) + (uint32_t)(i % 65536));

			build(frames[n], src_mac, dst_mac, saddr, daddr, (uint16_t)(1024 + i / 65536), dport,
			      (uint32_t)i * 7919u);
			iov[n].iov_base = frames[n];
			iov[n].iov_len = FRAME_LEN;
			memset(&msgs[n], 0, sizeof(msgs[n]));
			msgs[n].msg_hdr.msg_iov = &iov[n];
			msgs[n].msg_hdr.msg_iovlen = 1;
			msgs[n].msg_hdr.msg_name = &sll;
			msgs[n].msg_hdr.msg_namelen = sizeof(sll);
		}
		int r = sendmmsg(fd, msgs, (unsigned int)n, 0);
		if (r < 0) {
			if (errno == ENOBUFS || errno == EAGAIN) {
				usleep(100);
				continue;
			}
			perror("synflood: sendmmsg");
			return 1;
		}
		sent += r;
	}
	printf("{\"sent\":%ld,\"ms\":%llu}\n", sent, (unsigned long long)(now_ms() - start));
	close(fd);
	return 0;
}
