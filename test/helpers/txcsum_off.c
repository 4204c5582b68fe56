// txcsum_off DEVICE: turn off TX checksum offload of DEVICE in the current
// network namespace (ethtool -K DEVICE tx off, without ethtool).
//
// Why the XDP e2e needs it: a veth hands the frames of a local socket to the
// peer with the TCP/UDP checksum still to be finished (CHECKSUM_PARTIAL).
// Native XDP on the peer sees only the bytes, not that state, so it cannot
// update such a checksum correctly; a real NIC never receives one. The
// client namespace of the test plays an external machine, so its device
// sends complete checksums, as a NIC on the wire would.
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct ethtool_value value = { .cmd = ETHTOOL_STXCSUM, .data = 0 };
	struct ifreq ifr;
	int fd;

	if (argc != 2 || strlen(argv[1]) >= IFNAMSIZ) {
		fprintf(stderr, "usage: txcsum_off DEVICE\n");
		return 2;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	memset(&ifr, 0, sizeof(ifr));
	strncpy(ifr.ifr_name, argv[1], IFNAMSIZ - 1);
	ifr.ifr_data = (void *)&value;
	if (ioctl(fd, SIOCETHTOOL, &ifr) < 0) {
		perror("SIOCETHTOOL ETHTOOL_STXCSUM");
		close(fd);
		return 1;
	}
	close(fd);
	return 0;
}
