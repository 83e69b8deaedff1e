/* A CPU-bound app for bench/health_at_peak.py: N threads that spin for ever, and a
 * line "ready" once they all run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *spin(void *arg) {
    volatile unsigned long n = 0;
    (void)arg;
    for (;;) n++;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
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
