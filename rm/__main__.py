from rm.cli import main

raise SystemExit(main())
