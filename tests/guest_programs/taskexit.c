/*
 * taskexit: the event of perf's test 24 ("Number of exit events of a
 * simple workload", tools/perf/tests/task-exit.c in perf 6.1) on a child
 * that execs `true`: cycles, sample_period 1, task, wakeup_events 1,
 * exclude_kernel, opened on the child before it execs.  Unlike the perf
 * test, it reaps the child before reading the ring, so what it prints does
 * not depend on how the guest schedules parent and child around the exit
 * (the perf test's poll loop does: docs/design/perf-test.md).
 *
 * The event is opened disabled and enabled once its ring is mapped: the
 * child may run its fork-return code between perf_event_open() and
 * mmap(), and perf core drops samples that find no ring (-ENOSPC from
 * __perf_output_begin, no LOST record), on hardware as under pvperf.  It
 * cost 10 of 137 samples whenever the scheduler let the child run first.
 *
 * Prints: records=<types in ring order, S sample, E exit, L lost, ? other>
 * and exit_records= samples= count= pollhup=.
 */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define DATA_PAGES 128

static int open_test24_event(pid_t pid)
{
	struct perf_event_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_HARDWARE;
	attr.config = PERF_COUNT_HW_CPU_CYCLES;
	attr.sample_period = 1;
	attr.task = 1;
	attr.wakeup_events = 1;
	attr.exclude_kernel = 1;
	attr.disabled = 1;	/* enabled once the ring is mapped */
	return syscall(SYS_perf_event_open, &attr, pid, -1, -1, 0);
}

/* The child waits for the go byte, then execs `true`. */
static pid_t fork_workload(int *go)
{
	int fds[2];
	pid_t pid;
	char c;

	if (pipe(fds))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(fds[1]);
		if (read(fds[0], &c, 1) == 1)
			execlp("true", "true", (char *)NULL);
		_exit(127);
	}
	close(fds[0]);
	*go = fds[1];
	return pid;
}

static char record_letter(unsigned int type)
{
	switch (type) {
	case PERF_RECORD_SAMPLE: return 'S';
	case PERF_RECORD_EXIT: return 'E';
	case PERF_RECORD_LOST:
	case PERF_RECORD_LOST_SAMPLES: return 'L';
	default: return '?';
	}
}

int main(void)
{
	size_t page = sysconf(_SC_PAGESIZE), len = (DATA_PAGES + 1) * page;
	struct perf_event_mmap_page *meta;
	unsigned long long count = 0, off, head;
	int go, fd, status, exits = 0, samples = 0;
	unsigned int prev = 0;
	struct pollfd pfd;
	char *data;
	pid_t pid;

	pid = fork_workload(&go);
	fd = pid < 0 ? -1 : open_test24_event(pid);
	if (fd < 0) {
		perror("taskexit: perf_event_open");
		return 1;
	}
	meta = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (meta == MAP_FAILED || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) ||
	    write(go, "x", 1) != 1 ||
	    waitpid(pid, &status, 0) != pid) {
		perror("taskexit");
		return 1;
	}
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	poll(&pfd, 1, 0);
	head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
	data = (char *)meta + page;
	printf("records=");
	for (off = 0; off < head && off < DATA_PAGES * page;) {
		struct perf_event_header *h = (void *)(data + off);

		exits += h->type == PERF_RECORD_EXIT;
		samples += h->type == PERF_RECORD_SAMPLE;
		/* Runs of samples as one letter: the order is what matters. */
		if (h->type != PERF_RECORD_SAMPLE || prev != PERF_RECORD_SAMPLE)
			putchar(record_letter(h->type));
		prev = h->type;
		if (!h->size)
			break;
		off += h->size;
	}
	if (read(fd, &count, sizeof(count)) != sizeof(count))
		count = 0;
	printf(" exit_records=%d samples=%d count=%llu pollhup=%d\n", exits,
	       samples, count, !!(pfd.revents & POLLHUP));
	return 0;
}
