#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t dt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * DT_NSEC_PER_SEC + ts.tv_nsec;
}

double dt_wall_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t dt_deadline_in(double seconds)
{
	if (seconds >= 9e9)
		return DT_DEADLINE_NONE;
	return dt_now_ns() + (int64_t)(seconds * 1e9);
}

int dt_deadline_ms_left(int64_t deadline)
{
	if (deadline == DT_DEADLINE_NONE)
		return 2147483647;
	int64_t left = deadline - dt_now_ns();
	if (left <= 0)
		return 0;
	int64_t ms = (left + 999999) / 1000000;
	return ms > 2147483647 ? 2147483647 : (int)ms;
}

int dt_deadline_passed(int64_t deadline)
{
	return deadline != DT_DEADLINE_NONE && dt_now_ns() >= deadline;
}

void dt_sleep(double seconds)
{
	if (seconds <= 0)
		return;
	struct timespec req = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
	while (nanosleep(&req, &req) != 0 && errno == EINTR)
		;
}

double dt_process_age_seconds(void)
{
	FILE *f = fopen("/proc/self/stat", "r");
	if (!f)
		return -1;
	char buf[1024];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Field 2 (comm) may contain spaces; fields after the last ')' are plain. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	unsigned long long start_ticks = 0;
	/* After ')' come fields 3..; starttime is field 22, i.e. the 20th after comm. */
	int field = 2;
	for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " ")) {
		if (++field == 22) {
			start_ticks = strtoull(tok, NULL, 10);
			break;
		}
	}
	if (field != 22)
		return -1;
	struct timespec now;
	clock_gettime(CLOCK_BOOTTIME, &now);
	double boot_now = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
	return boot_now - (double)start_ticks / (double)sysconf(_SC_CLK_TCK);
}
