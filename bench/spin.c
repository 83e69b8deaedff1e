/* A CPU-bound app for bench/health_at_peak.py and bench/ready_port_at_peak.py: N
 * threads that spin for ever, and a line "ready" once they all run. With a second
 * argument `block-term` every thread blocks SIGTERM, so a relayed stop signal stays
 * pending where /proc shows it (ShdPnd) and only the grace deadline's SIGKILL ends it. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *spin(void *arg) {
    volatile unsigned long n = 0;
    (void)arg;
    for (;;) n++;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2 && strcmp(argv[2], "block-term") == 0) {
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &term, NULL); /* inherited by every thread below */
    }
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, spin, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
