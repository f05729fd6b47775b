"""``python -m examples.django_project.manage migrate`` / ``... firesafe_worker --burst``."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
