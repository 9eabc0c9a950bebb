// Who is logged in, shared by every page through a context.
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { Settings, UserInfo } from "./api/types";

export interface Session {
  user: UserInfo;
  settings: Settings;
}

export const SessionContext = createContext<Session>({ user: {}, settings: {} });
export const useSession = () => useContext(SessionContext);
