/* Linked against libhpcfft.so.1 (no rpath): it runs only when LD_LIBRARY_PATH finds it. */
#include <stdio.h>
int hpcfft_plan(int n);
int main(void) {
    printf("plan %d\n", hpcfft_plan(64));
    return 0;
}
