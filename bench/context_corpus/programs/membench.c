/* Touch N MB of heap, 10 MB at a time (a C program: the OOM kill hits a native binary). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long target = argc > 1 ? atol(argv[1]) : 100;
    for (long mb = 10; mb <= target; mb += 10) {
        char *chunk = malloc(10L << 20);
        if (!chunk) { perror("malloc"); return 1; }
        memset(chunk, 7, 10L << 20);
        printf("membench: %ld MB resident\n", mb);
        fflush(stdout);
        usleep(150000);
    }
    printf("membench: done\n");
    return 0;
}
