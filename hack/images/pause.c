/*
 * The pod sandbox ("pause") process for the test environment's containerd:
 * it holds the pod's namespaces open, reaps zombies (it is PID 1 when the pod
 * shares its process namespace) and exits cleanly on SIGINT/SIGTERM. Built
 * statically by hack/images/build-test-images.sh, since no registry is
 * reachable to pull the upstream image.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_terminate(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    printf("errand pause\n");
    return 0;
  }
  if (getpid() != 1) {
    fprintf(stderr, "Warning: pause should be the first process\n");
  }
  struct sigaction terminate = {.sa_handler = on_terminate};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &terminate, NULL) < 0 || sigaction(SIGTERM, &terminate, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
