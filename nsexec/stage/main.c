/*
 * main.c: the entry point of the standalone stage binary that build.sh
 * links from nsexec's C files with musl (see build.sh), which builds them
 * with JAIL_STAGE_MAIN: no constructor (musl passes constructors no
 * arguments); main hands argv to the stage, which never returns when
 * argv[0] names a role.
 */
#include <stdio.h>

void jail_stage_main(int argc, char **argv);

int main(int argc, char **argv)
{
	jail_stage_main(argc, argv);
	fputs("jail stage: started by jail only (argv[0] names its role)\n", stderr);
	return 2;
}
